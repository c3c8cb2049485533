"""Load the stack program named by the project's Pulumi.yaml, to run it inline."""

import importlib.util
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

import yaml


@cache
def load_program(project_dir: Path) -> Callable[[], None]:
    """`main()` of `<main>/program.py`, where `main` is the project's program directory.

    The Automation API runs an inline program in this process and serves the language
    runtime itself, so no Python language host plugin is needed.
    """
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text())
    main_dir = (project_dir / project.get("main", ".")).resolve()
    if str(main_dir) not in sys.path:
        sys.path.insert(0, str(main_dir))  # the program imports its sibling modules
    spec = importlib.util.spec_from_file_location("spotpool_stack_program", main_dir / "program.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no stack program at {main_dir / 'program.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    main: Callable[[], object] = module.main

    def run() -> None:
        main()

    return run
