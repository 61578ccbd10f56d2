"""Fixtures of the AgentScope tests (helpers live in as_router.py and scenario.py)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest_asyncio

sys.path.insert(0, str(Path(__file__).parent))

from as_router import Router  # noqa: E402


@pytest_asyncio.fixture(scope="module")
async def as_router(bins: Any) -> AsyncIterator[Router]:
    """A router of its own for the module, with no built-in tools."""
    r = Router()
    try:
        await r.ready()
        yield r
    finally:
        r.stop()
