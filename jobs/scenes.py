"""Run the ``scenes`` stage alone: ``python -m jobs.scenes [overrides]`` (see ``--help``)."""

from jobs._entry import stage_main

main = stage_main("scenes")

if __name__ == "__main__":
    main()
