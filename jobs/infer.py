"""Run the ``infer`` stage alone: ``python -m jobs.infer [overrides]`` (see ``--help``)."""

from jobs._entry import stage_main

main = stage_main("infer")

if __name__ == "__main__":
    main()
