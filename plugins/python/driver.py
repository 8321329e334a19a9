# SPDX-License-Identifier: MIT
# The event loop an `async def process` runs on (worker.c: drive_source[], embedded at
# build time by daemon/shared/embed_py.py).
import asyncio
class Driver:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.done = []
        self.waiter = None
    def _finished(self, key, task):
        self.done.append((key, task))
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
    def _wake(self):
        if not self.waiter.done():
            self.waiter.set_result(None)
    def submit(self, coro, key):
        t = self.loop.create_task(coro)
        t.add_done_callback(lambda t, key=key: self._finished(key, t))
    def poll(self, timeout, most):
        if not self.done:
            self.waiter = self.loop.create_future()
            h = self.loop.call_later(timeout, self._wake)
            try:
                self.loop.run_until_complete(self.waiter)
            finally:
                h.cancel()
                self.waiter = None
        out, self.done = self.done[:most], self.done[most:]
        return out
    def run(self, coro):
        t = self.loop.create_task(coro)
        try:
            return self.loop.run_until_complete(t)
        finally:
            if not t.done():
                t.cancel()
                try:
                    self.loop.run_until_complete(t)
                except BaseException:
                    pass
