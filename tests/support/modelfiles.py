"""The Modelfile corpus the parser and create tests read (tests/data/modelfiles)."""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "data" / "modelfiles"
CORPUS_FILES = sorted(CORPUS.glob("*.Modelfile"))
