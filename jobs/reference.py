"""Run the ``reference`` stage alone: ``python -m jobs.reference [overrides]`` (see ``--help``)."""

from jobs._entry import stage_main

main = stage_main("reference")

if __name__ == "__main__":
    main()
