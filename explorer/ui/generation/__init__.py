"""The generation pane and its parts.

* ``pane``: ``GenerationPane``, the widget (hosted by ``explorer.ui.window.docks.add_generation_dock``);
* ``controls``: the sampling controls form; ``token_text``: the streaming, clickable text;
* ``candidate_chart``: one step's candidates before and after the controls, as bars;
* ``steps``: ``StepView``, the shown step (selector, line, chart), an object the pane owns;
* ``stream``: the worker's generator, its pacing, and ``GenerationRun`` (a run in a worker, Stop,
  shutdown), an object the pane owns.

Re-scoring a step (the candidate table, describing the controls) is Qt-free and lives in
``explorer.core.generation.candidates``.
"""

from explorer.ui.generation.candidate_chart import CandidateChart
from explorer.ui.generation.pane import GenerationPane
from explorer.ui.generation.stream import stream_steps
from explorer.ui.generation.token_text import TokenText, prob_colour

__all__ = ["CandidateChart", "GenerationPane", "TokenText", "prob_colour", "stream_steps"]
