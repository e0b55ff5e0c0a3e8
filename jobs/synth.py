"""Run the ``synth`` stage alone: ``python -m jobs.synth [overrides]`` (see ``--help``)."""

from jobs._entry import stage_main

main = stage_main("synth")

if __name__ == "__main__":
    main()
