"""A burst of pokes starts at most `STARTS_PER_TURN` passes in one turn of the event loop, in the order poked,
so what else the loop serves (the operator's /healthz, /metrics and alert webhook) waits for one turn's passes,
not for the whole burst's."""

from __future__ import annotations

import asyncio
import time

from heterojob.controller.queue import STARTS_PER_TURN, WorkQueue


def test_a_burst_of_passes_lets_the_loop_answer_between_turns_and_keeps_their_order() -> None:
    ran: list[str] = []
    answered_after: list[int] = []

    async def one_pass(key: str) -> None:
        time.sleep(0.0002)  # a pass's synchronous part (parsing, planning, bookkeeping) before its first await
        ran.append(key)

    async def main() -> None:
        queue = WorkQueue(one_pass)
        keys = [f"ns/j{i:04d}" for i in range(2000)]
        for key in keys:
            queue.poke(key)
        await asyncio.sleep(0)  # a request arriving meanwhile (a probe) is answered on its next turn
        answered_after.append(len(ran))
        while len(ran) < len(keys):
            await asyncio.sleep(0.01)
        assert ran == keys  # first come, first served
        queue.poke("ns/late")  # after the burst: at once
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert ran[-1] == "ns/late"

    asyncio.run(main())
    assert answered_after[0] <= 2 * STARTS_PER_TURN  # not after all 2,000 (0.4 s of passes here)
