"""The template families whose code kernelflow writes itself: every family but inductor, whose generation runs
torch.compile (seconds a problem). A test of which of them a problem gets, or of their proposals, asks these; the
inductor family's own tests are tests/stages/templates/test_inductor.py."""

from kernelflow.stages.templates import TEMPLATES

WRITTEN = [family for family in TEMPLATES if family != "inductor"]
