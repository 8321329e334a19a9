# SPDX-License-Identifier: MIT
# `gpud check --import` (host/job/python.c: import_script[], embedded at build time by
# embed_py.py), run by the chosen Python in a process of its own: it loads each python
# section's script or module as the plugins would and checks what the job names in it
# against the keys the job gives, with the `gpud` module the plugins build in
# (gpud_module.py: argv[1]) in place of any other. Arguments: "--keys=KIND=K1,K2,..."
# for each kind (the plugins' own keys, daemon/shared/py_keys.h: every other key is the
# user code's), "--callbacks=NAME,..." (a python sink's, py_keys.h), then "--section=KIND"
# and that section's KEY=VALUE (paths already resolved) for each python section. It
# prints "gpud-import-ok: ..." and "gpud-import-error: ..." lines (whatever the user's
# module prints at import comes in between) and exits 0.
import sys, os, inspect, importlib, importlib.util, traceback, types
gpud = types.ModuleType('gpud')
exec(sys.argv.pop(1), gpud.__dict__)
sys.modules['gpud'] = gpud
OURS = {}  # kind: the plugin's own keys
CALLBACKS = ()
sections = []
for a in sys.argv[1:]:
    if a.startswith('--keys='):
        k, _, v = a[7:].partition('=')
        OURS[k] = set(v.split(','))
    elif a.startswith('--callbacks='):
        CALLBACKS = tuple(a[12:].split(','))
    elif a.startswith('--section='):
        sections.append((a[10:], {}))
    else:
        k, _, v = a.partition('=')
        sections[-1][1][k] = v
loaded = {}
def ok(kind, msg): print('gpud-import-ok: [%s] %s' % (kind, msg), flush=True)
def bad(kind, msg): print('gpud-import-error: [%s] %s' % (kind, msg), flush=True)
def where(e):
    tb = traceback.extract_tb(e.__traceback__)
    return ' (at %s:%d)' % (tb[-1].filename, tb[-1].lineno) if tb else ''
def load(kind, a):
    for d in reversed([d for d in a.get('python_path', '').split(':') if d]):
        sys.path.insert(0, d)
    if 'script' in a:
        real = os.path.realpath(a['script'])
        if real not in loaded:
            sys.path.insert(0, os.path.dirname(real))
            spec = importlib.util.spec_from_file_location('__gpud_%s__' % kind.replace('.', '_'), real)
            if spec is None:
                raise ImportError('not a Python file')
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
            loaded[real] = mod
        return loaded[real], 'script = %s' % a['script']
    if 'module' not in a:
        raise ImportError('give script = FILE.py or module = NAME (neither is given)')
    return importlib.import_module(a['module']), 'module = %s' % a['module']
def defined(mod, want):
    names = sorted(n for n, v in vars(mod).items() if not n.startswith('_') and want(v)
                   and getattr(v, '__module__', None) == mod.__name__)
    return ', '.join(names) if names else 'none'
def binds(f, what, args, kw):
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(*args, **kw)
    except TypeError as e:
        keys = ', '.join(sorted(kw)) or 'none'
        return '%s%s cannot take the job\'s keys as keywords (%s): %s' % (
            what, sig, keys, e)
    return None
def takes(f, kw):
    given = ', '.join(sorted(kw))
    try:
        ps = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        ps = ()
    var = [p.name for p in ps if p.kind == p.VAR_KEYWORD]
    if var:
        return 'any keys (**%s)%s' % (var[0], '; the job gives ' + given if given else '')
    return given or 'no keys'
for kind, a in sections:
    role = 'worker' if kind.startswith('stage.') else kind
    kw = {k: v for k, v in a.items() if k not in OURS[role]}
    try:
        mod, src = load(kind, a)
    except BaseException as e:
        bad(kind, '%s: importing it raised %s: %s%s' % (
            'script = ' + a['script'] if 'script' in a else 'module = ' + a.get('module', '?'),
            type(e).__name__, e, where(e)))
        continue
    if role == 'worker':
        name = a.get('class', '')
        cls = getattr(mod, name, None)
        if not inspect.isclass(cls):
            bad(kind, 'class = %s: %s has no class %s; it defines: %s' % (
                name, src, name, defined(mod, inspect.isclass)))
            continue
        why = binds(cls, name, (), {})
        if why:
            bad(kind, why.replace(' as keywords', ' (the worker is made as %s())' % name))
            continue
        has = [m for m in ('process', 'process_batch') if callable(getattr(cls, m, None))]
        if not has:
            bad(kind, 'class = %s: %s has neither process(data) nor process_batch(items)' % (
                name, name))
            continue
        setup = getattr(cls, 'setup', None)
        if not callable(setup):
            bad(kind, 'class = %s: %s has no setup(gpu_id, seed, **kwargs) (inherit '
                'gpud.BaseWorker, or define it)' % (name, name))
            continue
        why = binds(setup, '%s.setup' % name, (None, 0, 0), kw)
        if why:
            bad(kind, why)
            continue
        ok(kind, '%s in %s: %s; setup() takes %s' % (name, src, ', '.join(has),
           takes(setup, kw)))
    elif role == 'generator':
        name = a.get('function', '')
        fn = getattr(mod, name, None)
        if not callable(fn):
            bad(kind, 'function = %s: %s has no function %s; it defines: %s' % (
                name, src, name, defined(mod, inspect.isfunction)))
            continue
        why = binds(fn, name, (), kw)
        if why:
            bad(kind, why)
            continue
        ok(kind, '%s() in %s takes %s' % (name, src, takes(fn, kw)))
    else:
        name = a.get('class')
        holder = mod
        if name:
            holder = getattr(mod, name, None)
            if not inspect.isclass(holder):
                bad(kind, 'class = %s: %s has no class %s; it defines: %s' % (
                    name, src, name, defined(mod, inspect.isclass)))
                continue
            why = binds(holder, name, (), kw)
            if why:
                bad(kind, why)
                continue
        cbs = [c for c in CALLBACKS if callable(getattr(holder, c, None))]
        if not cbs:
            bad(kind, '%s defines none of %s' % (name or src, ', '.join(CALLBACKS)))
            continue
        ok(kind, '%s in %s: %s' % (name or 'functions', src, ', '.join(cbs)))
