"""`TraceWriter`: a run's trace file written as the run goes, in `Trace.save`'s format byte
for byte, so saving a trace costs disk, not memory (a lean run's `Keep(trace_file=...)`).

The steps (as the RunLog folds them) and each request's record (when it finished, or at the
end for one that never did) go to two unnamed spool files beside the target; the offsets of
the records are kept by request row. `close()` writes the file: the header line (engine
config, model info, config.json, executor, then every request in submission order, read
back one at a time) and the step lines after it, into a temporary name that then replaces
`path`, so a run that fails leaves no half-written trace (the spools vanish with the process).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from shared.config.engine_config import EngineConfig, ModelInfo
from shared.trace.step_record import StepValues
from shared.trace.trace import TRACE_FORMAT, TRACE_VERSION, RequestRecord, step_record_of


class TraceWriter:
    def __init__(self, path: str | Path, engine_config: EngineConfig, model_info: ModelInfo,
                 model_config: dict[str, Any], executor: dict[str, Any]) -> None:
        self.path = Path(path)
        self._head = {"format": TRACE_FORMAT, "version": TRACE_VERSION,
                      "engine_config": engine_config.to_dict(), "model_info": model_info.to_dict(),
                      "model_config": model_config, "executor": executor, "requests": []}
        # NOTE: the spools live across calls until close(); unnamed, they vanish with the process
        self._steps = tempfile.TemporaryFile("w+b", dir=self.path.parent)  # noqa: SIM115
        self._requests = tempfile.TemporaryFile("w+b", dir=self.path.parent)  # noqa: SIM115
        self._spans = np.zeros((1024, 2), np.int64)    # [rows, (offset, length)] of each record

    def steps(self, chunk: list[StepValues]) -> None:
        """Append these steps' lines."""
        self._steps.write("".join(json.dumps(step_record_of(v).to_dict()) + "\n"
                                  for v in chunk).encode())

    def request(self, row: int, record: RequestRecord) -> None:
        """Keep request `row`'s final record."""
        if row >= len(self._spans):
            self._spans = np.concatenate((self._spans, np.zeros_like(self._spans)))
        data = json.dumps(record.to_dict()).encode()
        self._spans[row] = (self._requests.tell(), len(data))
        self._requests.write(data)

    def close(self, num_requests: int) -> None:
        """Write the trace file of the first `num_requests` rows (each given once)."""
        part = self.path.with_name(self.path.name + ".part")
        with open(part, "wb") as out:
            head = json.dumps(self._head)
            out.write(head[:-len("[]}")].encode() + b"[")   # NOTE: "requests" is the last key
            for row in range(num_requests):
                offset, length = self._spans[row]
                self._requests.seek(offset)
                out.write((b", " if row else b"") + self._requests.read(length))
            out.write(b"]}\n")
            self._steps.seek(0)
            shutil.copyfileobj(self._steps, out)
        os.replace(part, self.path)
        self._steps.close()
        self._requests.close()
