"""Training data as the server receives it: labels and a design matrix whose first column is
reserved for the intercept, grown as rows arrive, within the call's memory limit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learnedidx.errors import TooLargeError, TrainingDataError


@dataclass
class TrainingData:
    y: np.ndarray  # float64 (rows,): the label of every usable row
    design: np.ndarray  # float64 (rows, 1 + d): column 0 all ones, the features after it
    rows_total: int  # rows the caller's SELECT returns
    rows_skipped: int  # rows with a NULL (or a NULL array element), as MADlib skips them
    path: str  # "pages" or "query"
    features_form: str  # "array" (one array column) or "scalars"
    seconds: float  # from asking for the pass to its end
    decode_seconds: float  # of which the decoding thread worked
    why: str | None = None  # why the page path did not read it, when it did not

    @property
    def X(self) -> np.ndarray:
        """The features as read (a view of :attr:`design` without the intercept column)."""
        return self.design[:, 1:]


class RowBuffer:
    """Rows appended in order: ``y`` and ``design`` (features from column 1 on), grown
    geometrically; their bytes may not exceed ``max_bytes`` (TooLargeError) nor the features
    ``max_features``."""

    def __init__(self, max_bytes: int, max_features: int) -> None:
        self.max_bytes, self.max_features = max_bytes, max_features
        self.n = 0
        self.width = -1  # features per row, once known
        self.y = np.empty(0)
        self.design = np.empty((0, 0))

    def _allocate(self, rows: int) -> None:
        need = rows * (self.width + 2) * 8
        if need > self.max_bytes:
            raise TooLargeError(f"the training data need more than the server's memory limit per call "
                                f"({self.max_bytes:,} bytes; its administrator sets --max-call-memory)")
        y, design = np.empty(rows), np.empty((rows, self.width + 1))
        if self.n:
            y[:self.n], design[:self.n] = self.y[:self.n], self.design[:self.n]
        self.y, self.design = y, design

    def expect(self, rows: int) -> None:
        """Room for about ``rows`` rows in all (an estimate; appending grows beyond it)."""
        if self.width >= 0 and rows > len(self.y):
            self._allocate(rows)

    def reserve(self, rows: int, width: int) -> int:
        """Room for ``rows`` more rows of ``width`` features; returns where they start."""
        if self.width < 0:
            if width > self.max_features:
                raise TooLargeError(f"{width} features exceed the server's limit of {self.max_features} per model "
                                    "(its administrator sets --max-features)")
            self.width = width
        elif width != self.width:
            raise TrainingDataError(f"rows of {width} features follow rows of {self.width}")
        if self.n + rows > len(self.y):
            self._allocate(max(self.n + rows, len(self.y) * 3 // 2, 1024))
        start, self.n = self.n, self.n + rows
        return start

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """(y, design) of the rows appended, the design's intercept column set to ones."""
        design = self.design[:self.n] if self.width >= 0 else np.empty((0, 1))
        design[:, 0] = 1.0
        return self.y[:self.n], design
