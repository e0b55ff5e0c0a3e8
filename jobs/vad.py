"""Run the ``vad`` stage alone: ``python -m jobs.vad [overrides]`` (see ``--help``)."""

from jobs._entry import stage_main

main = stage_main("vad")

if __name__ == "__main__":
    main()
