"""lcb: single- and multi-agent LLM teams on LiveCodeBench, graded as LiveCodeBench grades."""

__version__ = "0.1.0"
