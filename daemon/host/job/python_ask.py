# SPDX-License-Identifier: MIT
# What host/job/python.c asks an interpreter, run as `PYTHON -c` (ask_script[], embedded
# at build time by embed_py.py): its name=value lines after "gpud-python-ask". Runs on
# Python 2 as well, so that what is refused can be named.
import sys
try:
    import sysconfig
    g = sysconfig.get_config_var
    site = sysconfig.get_paths().get('purelib')
except Exception:
    g = lambda k: None
    site = None
impl = getattr(getattr(sys, 'implementation', None), 'name', 'cpython')
out = [('executable', sys.executable), ('prefix', sys.prefix),
       ('base_prefix', getattr(sys, 'base_prefix', sys.prefix)),
       ('version', '%d.%d.%d' % tuple(sys.version_info[:3])),
       ('implementation', impl), ('libdir', g('LIBDIR')), ('ldlibrary', g('LDLIBRARY')),
       ('instsoname', g('INSTSONAME')), ('abiflags', getattr(sys, 'abiflags', '')),
       ('gil_disabled', g('Py_GIL_DISABLED')), ('site', site)]
sys.stdout.write('gpud-python-ask\n')
for k, v in out:
    sys.stdout.write('%s=%s\n' % (k, v))
