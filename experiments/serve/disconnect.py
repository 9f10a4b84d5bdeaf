"""`unless_disconnected`: a whole (non-streamed) answer that stops when its client goes away.

A streamed answer learns of a disconnect when its next write fails; a whole one writes only
at the end, so without a watch a client that gave up would keep its request decoding, and
its KV held, to the last token. This races the answer against the connection's
`http.disconnect` message (vLLM's `with_cancellation` does the same).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import Response

CLIENT_CLOSED = 499   # nginx's "client closed request": nobody reads it


async def unless_disconnected(request: Request, answer: Coroutine[Any, Any, Any],
                              on_gone: Callable[[], object]) -> Any:
    """`await answer`, unless the client disconnects first: then the answer is cancelled,
    `on_gone()` runs (abort the request) and an empty 499 response is returned."""
    work = asyncio.ensure_future(answer)
    gone = asyncio.ensure_future(_disconnected(request))
    done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    if work in done:
        gone.cancel()
        return work.result()
    work.cancel()
    on_gone()
    return Response(status_code=CLIENT_CLOSED)


async def _disconnected(request: Request) -> None:
    """Returns once the connection's `http.disconnect` arrives (the body was read before)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
