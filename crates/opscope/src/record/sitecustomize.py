"""opscope record's Python bootstrap (written into the session by `opscope record`).

Runs the `sitecustomize` this one shadows, then waits for frameworks to be imported:
- torch: turns on `torch.autograd.profiler.emit_itt()`, so each aten op is an ITT task
  that opscope's collector records;
- tensorflow / jax: runs their profiler for the whole program, writing its XPlane into
  the session directory (not with `--cupti`: on GPU builds it would take CUPTI over).
A program that imports none of them is left as it is. Nothing here may raise into the
program: every hook is guarded.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_SESSION = os.environ.get("OPSCOPE_SESSION_DIR", "")


def _warn(what, error):
    sys.stderr.write("opscope: %s: %s\n" % (what, error))


def _chain():
    """Imports the next `sitecustomize` on the path, the one this module shadows."""
    saved_path = list(sys.path)
    ours = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as e:  # the user's sitecustomize failed: say so, as Python would
        _warn("the program's sitecustomize failed", e)
    finally:
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _on_torch(torch):
    profiler = torch.autograd.profiler
    if not hasattr(profiler, "emit_itt"):
        return
    context = profiler.emit_itt()
    context.__enter__()
    import atexit

    atexit.register(lambda: context.__exit__(None, None, None))


def _profile_dir(framework):
    return os.path.join(_SESSION, framework)


# TensorFlow's and JAX's profilers are one profiler underneath (TSL): only the first
# framework imported starts it (Keras imports JAX when it is installed).
_profiling = []


def _on_tensorflow(tf):
    profiler = getattr(getattr(tf, "profiler", None), "experimental", None)
    if profiler is None or _profiling:
        return
    profiler.start(_profile_dir("tensorflow"))
    _profiling.append("tensorflow")
    import atexit

    atexit.register(profiler.stop)


def _on_jax(jax):
    # Keras imports JAX while TensorFlow is being imported: the program is TF's.
    if _profiling or "tensorflow" in sys.modules:
        return
    jax.profiler.start_trace(_profile_dir("jax"))
    _profiling.append("jax")
    import atexit

    atexit.register(jax.profiler.stop_trace)


_HOOKS = {"torch": _on_torch, "tensorflow": _on_tensorflow, "jax": _on_jax}
if os.environ.get("OPSCOPE_CUPTI") == "1":
    # opscope records CUDA through CUPTI itself; these profilers would take it over.
    del _HOOKS["tensorflow"], _HOOKS["jax"]


class _Finder(object):
    """Finds nothing itself: for the framework packages it wraps the real loader so
    the hook runs right after the package finished importing."""

    def find_spec(self, name, path=None, target=None):
        if name not in _HOOKS:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        real_exec = loader.exec_module
        hook = _HOOKS.pop(name)

        def exec_module(module):
            real_exec(module)
            try:
                hook(module)
            except Exception as e:
                _warn("could not turn on %s's hooks" % name, e)

        loader.exec_module = exec_module
        return spec


def _flush_before_exit():
    """`os._exit` skips atexit, and with it the injected library's last write:
    multiprocessing's forked workers end that way. Flush first, when the library is
    loaded in this process (RTLD_NOLOAD: never load it just for this)."""
    library = os.environ.get("INTEL_LIBITTNOTIFY64")
    real_exit = os._exit
    if not library or getattr(real_exit, "_opscope", False):
        return

    def _exit(status):
        try:
            import ctypes

            ctypes.CDLL(library, mode=os.RTLD_NOLOAD).opscope_record_flush()
        except Exception:
            pass
        real_exit(status)

    _exit._opscope = True
    os._exit = _exit


_chain()
if _SESSION and os.environ.get("OPSCOPE_PYTHON_HOOKS", "1") != "0":
    sys.meta_path.insert(0, _Finder())
    _flush_before_exit()
