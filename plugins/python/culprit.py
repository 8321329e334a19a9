# SPDX-License-Identifier: MIT
# Where in a result JSON cannot follow (worker.c: culprit_source[], embedded at build
# time by daemon/shared/embed_py.py).
def culprit(o, path='result'):
    if o is None or isinstance(o, (str, int, float)):
        return None
    if isinstance(o, dict):
        for k, v in o.items():
            if k is not None and not isinstance(k, (str, int, float)):
                return '%s has a key of type %s.%s' % (path, type(k).__module__,
                                                      type(k).__qualname__)
            c = culprit(v, '%s[%r]' % (path, k))
            if c:
                return c
        return None
    if isinstance(o, (list, tuple)):
        for i, v in enumerate(o):
            c = culprit(v, '%s[%d]' % (path, i))
            if c:
                return c
        return None
    return '%s is a %s.%s' % (path, type(o).__module__, type(o).__qualname__)
