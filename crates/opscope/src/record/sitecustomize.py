"""opscope record's Python bootstrap (written into the session by `opscope record`).

Runs the `sitecustomize` this one shadows, then waits for frameworks to be imported:
- torch: turns on `torch.autograd.profiler.emit_itt()`, so each aten op is an ITT task
  that opscope's collector records;
- tensorflow / jax: runs their profiler, writing its XPlane into the session directory
  (not with `--cupti`: on GPU builds it would take CUPTI over);
- Keras 3 on TensorFlow: marks each call of its train function, so that the live
  stream to `opscope agent` has the steps before the XPlane is written.
A profiler the program starts itself wins: opscope's steps aside while it runs, comes
back when it stops, and notes it in the session (`.opscope/aside-PID.txt`). A program
that imports none of them is left as it is. Nothing here may raise into the program:
every hook is guarded.
"""

import os
import threading
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


def _note_aside(framework, what):
    """Appends to the session's list of the program's own profilers that opscope
    stepped aside for (`opscope record` names them in its summary)."""
    try:
        notes = os.path.join(_SESSION, ".opscope", "aside-%d.txt" % os.getpid())
        with open(notes, "a") as f:
            f.write("%s\t%s\n" % (framework, what))
    except Exception:
        pass


class _TorchModes(object):
    """PyTorch allows one profiler mode per thread: opscope's `emit_itt` yields to any
    profiler the program starts (torch.profiler, autograd's profilers, its own
    emit_itt/emit_nvtx) and comes back when that one stops. The program's calls reach
    torch's `_prepare/_enable/_disable_profiler` through the globals of the modules
    patched here; opscope's own calls pass straight through (`self.ours`)."""

    def __init__(self, torch):
        import threading

        self.profiler = torch.autograd.profiler
        self.context = None  # opscope's emit_itt while it is on
        self.thread = None  # the thread it is on (torch's modes are per thread)
        self.aside = False
        self.ours = threading.local()

    def start(self):
        context = self.profiler.emit_itt()
        self.ours.calling = True
        try:
            context.__enter__()
        finally:
            self.ours.calling = False
        import threading

        self.context, self.thread = context, threading.get_ident()

    def stop(self):
        context, self.context = self.context, None
        self.ours.calling = True
        try:
            context.__exit__(None, None, None)
        finally:
            self.ours.calling = False

    def _theirs(self):
        import threading

        return not getattr(self.ours, "calling", False) and (
            self.context is not None or self.aside
        ) and threading.get_ident() == self.thread

    def before_program_starts(self, what):
        if self._theirs() and self.context is not None:
            self.stop()
            self.aside = True
            _note_aside("torch", what)

    def after_program_stopped(self):
        if self._theirs() and self.aside and self.context is None:
            self.aside = False
            self.start()

    def patch(self, torch):
        import torch.autograd.profiler_legacy as legacy

        modes = self
        starts = {
            "_prepare_profiler": "a PyTorch profiler",
            "_enable_profiler": "a PyTorch profiler",
            "_enable_profiler_legacy": "PyTorch's legacy profiler",
        }

        def starting(real, what):
            def call(*args, **kwargs):
                modes.before_program_starts(what)
                try:
                    return real(*args, **kwargs)
                except BaseException:
                    modes.after_program_stopped()  # it never ran: opscope's goes on
                    raise

            return call

        def stopping(real):
            def call(*args, **kwargs):
                try:
                    return real(*args, **kwargs)
                finally:
                    try:
                        modes.after_program_stopped()
                    except Exception as e:
                        _warn("could not turn emit_itt back on", e)

            return call

        for module in (torch.autograd, self.profiler, legacy):
            for name, what in starts.items():
                if hasattr(module, name):
                    setattr(module, name, starting(getattr(module, name), what))
            for name in ("_disable_profiler", "_disable_profiler_legacy"):
                if hasattr(module, name):
                    setattr(module, name, stopping(getattr(module, name)))

        # The program's profiler, stopping, tells torch no profiler is on
        # (`_run_on_profiler_stop`); opscope's emit_itt is on again by then.
        real_stop_hook = getattr(self.profiler, "_run_on_profiler_stop", None)
        if real_stop_hook is not None:

            def on_profiler_stop():
                real_stop_hook()
                if modes.context is not None:
                    self.profiler._set_is_profiler_enabled(True)

            self.profiler._run_on_profiler_stop = on_profiler_stop


def _start_recording(expect_warm_up=False):
    """Starts the injected library now, on the main thread (see `opscope_record_start`):
    its file then names the main thread's `pthread_t`, by which a framework's profile
    (TSL's XPlane) names the thread."""
    library = os.environ.get("INTEL_LIBITTNOTIFY64")
    if not library:
        return
    try:
        import ctypes

        lib = ctypes.CDLL(library)
        if expect_warm_up:
            lib.opscope_record_expect_warm_up()
        lib.opscope_record_start()
    except Exception:
        pass


def _warm_up(torch):
    """What a process pays once, at its first range, is paid here, before the program
    runs: else it falls inside the program's first step, before that step's first
    range begins, and the step seems to start up to 1 ms late. That is the profiler
    ops' look-up (the first `record_function`s cost 0.1-0.3 ms), ITT's loading of the
    collector and the collector's start (its file, its writer thread: 0.5 ms), and the
    thread's buffer. Called with opscope's emit_itt on; the library does not record
    ranges of this name."""
    _start_recording(expect_warm_up=True)
    for _ in range(3):
        try:
            with torch.autograd.profiler.record_function("opscope warm-up"):
                pass
        except Exception:
            break


def _on_torch(torch):
    if not hasattr(torch.autograd.profiler, "emit_itt"):
        return
    modes = _TorchModes(torch)
    modes.patch(torch)
    modes.start()
    _warm_up(torch)
    import atexit

    def stop_at_exit():
        if modes.context is not None:
            modes.stop()

    atexit.register(stop_at_exit)


class _TslProfiler(object):
    """TensorFlow's and JAX's profilers are one profiler underneath (TSL), and only
    one session of it runs at a time: opscope's, started when the framework is
    imported, stops (its XPlane written) when the program starts its own, and starts
    again, into a new directory, when the program's stops."""

    def __init__(self):
        self.framework = None  # whose profiler is opscope's: "tensorflow" or "jax"
        self.start_ours = None
        self.stop_ours = None
        self.running = False
        # Why opscope's is off while the program runs: "profiler" (the program's own,
        # until it stops) and "traced run" (a Session.run whose RunOptions ask for a
        # trace; opscope's comes back at the next run that does not, so that a loop of
        # traced runs costs one stop, not one per run). It comes back when none is left.
        self.aside = set()
        self.runs = 0

    def own(self, framework, start, stop):
        self.framework, self.start_ours, self.stop_ours = framework, start, stop
        if threading.current_thread() is threading.main_thread():
            _start_recording()
        self.resume()
        import atexit

        atexit.register(self.stop_at_exit)

    def resume(self):
        self.runs += 1
        # PID.N: opscope reads the profile as this process's.
        run = "%d.%d" % (os.getpid(), self.runs)
        self.start_ours(os.path.join(_SESSION, self.framework, run))
        self.running = True

    def stop_at_exit(self):
        if self.running:
            self.running = False
            self.stop_ours()

    def before_program_starts(self, what, why="profiler"):
        if self.running:
            self.running = False
            self.aside.add(why)
            _note_aside(self.framework, what)
            self.stop_ours()
        elif self.aside:
            self.aside.add(why)

    def after_program_stopped(self, why="profiler"):
        if why in self.aside:
            self.aside.discard(why)
            if self.aside:
                return
            try:
                self.resume()
            except Exception as e:
                _warn("could not start the %s profiler again" % self.framework, e)

    def session_run(self, traced):
        """Before each TF1 `Session.run`: TensorFlow runs a profiler session of its own
        for a run whose RunOptions ask for a trace (RunMetadata's step stats), and
        refuses the run while another is active."""
        if traced:
            self.before_program_starts("a Session.run traced by its RunOptions", "traced run")
        else:
            self.after_program_stopped("traced run")

    def wrap(self, start, stop, what):
        """The program's start and stop of the profiler, around opscope's."""
        tsl = self

        def program_start(*args, **kwargs):
            tsl.before_program_starts(what)
            try:
                return start(*args, **kwargs)
            except BaseException:
                tsl.after_program_stopped()  # it never ran: opscope's goes on
                raise

        def program_stop(*args, **kwargs):
            try:
                return stop(*args, **kwargs)
            finally:
                tsl.after_program_stopped()

        return program_start, program_stop


_tsl = _TslProfiler()


def _on_tensorflow(tf):
    from tensorflow.python.profiler import profiler_v2

    api = tf.profiler.experimental
    start, stop = profiler_v2.start, profiler_v2.stop
    program_start, program_stop = _tsl.wrap(start, stop, "tf.profiler")
    for module in (profiler_v2, api):
        module.start, module.stop = program_start, program_stop
    if _tsl.framework is None:
        _tsl.own("tensorflow", lambda logdir: start(logdir), lambda: stop())
    _patch_tf1_sessions()


def _patch_tf1_sessions():
    """TF1 sessions ask for a trace per run (`RunOptions(trace_level=FULL_TRACE)`, or a
    callable made with such options); opscope's profiler steps aside for those runs."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.client import pywrap_tf_session, session

    base = session.BaseSession
    if getattr(base._call_tf_sessionrun, "_opscope", False):
        return
    real_run = base._call_tf_sessionrun

    def traced(options):
        # `options` is TensorFlow's buffer of the serialized RunOptions, or None.
        if options is None:
            return False
        try:
            parsed = config_pb2.RunOptions()
            parsed.ParseFromString(pywrap_tf_session.TF_GetBuffer(options))
            return parsed.trace_level != config_pb2.RunOptions.NO_TRACE
        except Exception:
            return False

    def call_tf_sessionrun(self, options, *args, **kwargs):
        _guarded(_tsl.session_run, traced(options))
        return real_run(self, options, *args, **kwargs)

    call_tf_sessionrun._opscope = True
    base._call_tf_sessionrun = call_tf_sessionrun

    callable_class = base._Callable
    real_init, real_call = callable_class.__init__, callable_class.__call__

    def init(self, session_, callable_options, *args, **kwargs):
        real_init(self, session_, callable_options, *args, **kwargs)
        try:
            level = callable_options.run_options.trace_level
            self._opscope_traced = level != config_pb2.RunOptions.NO_TRACE
        except Exception:
            self._opscope_traced = False

    def call(self, *args, **kwargs):
        _guarded(_tsl.session_run, getattr(self, "_opscope_traced", False))
        return real_call(self, *args, **kwargs)

    callable_class.__init__, callable_class.__call__ = init, call


def _guarded(hook, *args):
    """Runs one of opscope's hooks inside the program's call: never raises into it."""
    try:
        hook(*args)
    except Exception as e:
        _warn("a hook failed", e)


def _on_jax(jax):
    from jax._src import profiler

    start, stop = profiler.start_trace, profiler.stop_trace
    program_start, program_stop = _tsl.wrap(start, stop, "jax.profiler")
    for module in (profiler, jax.profiler):
        module.start_trace, module.stop_trace = program_start, program_stop
    fdo = getattr(profiler, "stop_and_get_fdo_profile", None)
    if fdo is not None:
        _, program_fdo = _tsl.wrap(start, fdo, "jax.profiler")
        profiler.stop_and_get_fdo_profile = program_fdo
        jax.profiler.stop_and_get_fdo_profile = program_fdo
    # Keras imports JAX while TensorFlow is being imported: the program is TF's.
    if _tsl.framework is None and "tensorflow" not in sys.modules:
        _tsl.own("jax", lambda logdir: start(logdir), lambda: stop())


def _on_keras_trainer(trainer):
    """Marks each call of Keras's train function (TensorFlow backend) as a range
    `keras train_function call` (category `opscope`) on the calling thread: the step
    TensorFlow's own profile records in its XPlane, which is written only when the
    profiler stops, so the live stream (`opscope agent`) would not see the steps
    without it. In the session, `steps` prefers TensorFlow's record of the call."""
    library = os.environ.get("INTEL_LIBITTNOTIFY64")
    if not library:
        return
    import ctypes

    lib = ctypes.CDLL(library)
    begin, end = lib.opscope_record_range_begin, lib.opscope_record_range_end
    begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    begin.restype = end.restype = None
    cls = trainer.TensorFlowTrainer
    make = cls.make_train_function
    if getattr(make, "_opscope", False):
        return

    def make_train_function(self, *args, **kwargs):
        made = make(self, *args, **kwargs)
        function = getattr(self, "train_function", None)
        if function is not None and not getattr(function, "_opscope", False):

            def train_function(*a, **k):
                begin(b"opscope", b"keras train_function call")
                try:
                    return function(*a, **k)
                finally:
                    end()

            train_function._opscope = True
            self.train_function = train_function
            return train_function if made is function else made
        return made

    make_train_function._opscope = True
    cls.make_train_function = make_train_function


_HOOKS = {
    "torch": _on_torch,
    "tensorflow": _on_tensorflow,
    "jax": _on_jax,
    # Keras 3's TensorFlow trainer (imported while TensorFlow is, so hooked by its own
    # name: Keras itself is not finished importing when TensorFlow imports it).
    "keras.src.backend.tensorflow.trainer": _on_keras_trainer,
}
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
