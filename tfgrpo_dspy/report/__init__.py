"""`tfgrpo report RUN/log`: one self-contained HTML page (and a PNG of its charts) of a training run.

    run     reading the run's log directory once (`load_run`, `Run`)
    story   what the run learned and why, in sentences: the top of the page
    charts  the charts that have data, as one PNG
    page    the HTML page and `write_report`
"""

from tfgrpo_dspy.report.page import write_report
from tfgrpo_dspy.report.run import RunReportError, load_run

__all__ = ["RunReportError", "load_run", "write_report"]
