"""The click group every command registers on, and the exit codes."""

from __future__ import annotations

import click

from .. import __version__

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}

# Exit codes: 0 done; 1 an error; 2 bad input (study file, flag, model, path); 3 a run finished but some
# configurations failed; 4 a run measured nothing (every configuration failed); 130 interrupted.
EXIT_SOME_FAILED = 3


EXIT_NOTHING_MEASURED = 4


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="llamalab")
def cli() -> None:
    """llamalab measures, on your own machine, what a llama.cpp build option or runtime flag costs in memory and
    buys in speed, and says what to do about it.

    \b
    Start here:
      llamalab demo                                  the pipeline-parallel study on a synthetic model (CPU only)
      llamalab run pipeline-parallel --model m.gguf  the same study on your model and GPUs
      llamalab tune --model m.gguf --budget 16GiB,12GiB   the best llama-server command for your rig
      llamalab inspect server.log                    where did my VRAM go? (any llama.cpp log)
      llamalab run versions                          the same configuration on two llama.cpp versions
      llamalab bisect GOOD BAD --repo ~/llama.cpp    which commit changed the compute buffers?
      llamalab report                                the last run as Markdown

    \b
    Exit codes: 0 done; 1 an error; 2 bad input (study file, flag, model, output path);
    3 the run finished but some configurations failed; 4 nothing was measured (every configuration failed);
    130 interrupted (rerun the same command to resume).
    """


