"""Run the ``reduce`` stage alone: ``python -m jobs.reduce [overrides]`` (see ``--help``)."""

from jobs._entry import stage_main

main = stage_main("reduce")

if __name__ == "__main__":
    main()
