# SPDX-License-Identifier: MIT
# What a python sink's on_resume gets (sink.c: done_tasks_source[], embedded at build
# time by daemon/shared/embed_py.py): the tasks earlier runs finished, as ranges.
import bisect
class DoneTasks:
    '''The tasks earlier runs finished (gpud run --resume), whose events this run
    does not deliver again: `task_id in done`, len(done), iteration in id order;
    done.ranges (a list of range), done.failed (a frozenset of the ids among
    them whose outcome was an error or a timeout).'''
    __slots__ = ('ranges', 'failed', '_starts')
    def __init__(self, ranges, failed):
        self.ranges = ranges
        self.failed = frozenset(failed)
        self._starts = [r.start for r in ranges]
    def __contains__(self, task_id):
        k = bisect.bisect_right(self._starts, task_id) - 1
        return k >= 0 and task_id in self.ranges[k]
    def __len__(self):
        return sum(len(r) for r in self.ranges)
    def __iter__(self):
        for r in self.ranges:
            yield from r
    def __repr__(self):
        return 'DoneTasks(%d tasks in %d ranges, %d failed)' % (
            len(self), len(self.ranges), len(self.failed))
