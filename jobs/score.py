"""Run the ``score`` stage alone: ``python -m jobs.score [overrides]`` (see ``--help``)."""

from jobs._entry import stage_main

main = stage_main("score")

if __name__ == "__main__":
    main()
