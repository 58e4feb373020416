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


class _Marks(object):
    """Ranges the bootstrap marks on the calling thread through the injected library
    (category `opscope`): the calls that are a framework's steps (Keras's train
    function, JAX's jitted functions, PyTorch's profiler steps while opscope's own
    hooks stand aside). They reach the session file and the agent's live stream alike,
    whatever profiler runs."""

    def __init__(self):
        self.begin = self.end = None
        self.aside_begin = self.aside_end = None
        library = os.environ.get("INTEL_LIBITTNOTIFY64")
        if not library:
            return
        try:
            import ctypes

            lib = ctypes.CDLL(library)
            begin, end = lib.opscope_record_range_begin, lib.opscope_record_range_end
            begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            begin.restype = end.restype = None
            self.begin, self.end = begin, end
            aside_begin, aside_end = lib.opscope_record_aside_begin, lib.opscope_record_aside_end
            aside_begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            aside_end.argtypes = [ctypes.c_char_p]
            aside_begin.restype = aside_end.restype = None
            self.aside_begin, self.aside_end = aside_begin, aside_end
        except Exception:
            pass


_marks_made = []


def _marks():
    if not _marks_made:
        _marks_made.append(_Marks())
    marks = _marks_made[0]
    return marks if marks.begin is not None else None


def _note_aside(framework, what, where=None):
    """Appends to the session's list of the program's own profilers that opscope
    stepped aside for, with the directory its profile goes to where the program named
    one (`opscope record` names them in its summary), and marks in the recording the
    time it stands aside (`opscope stood aside for …`, until `_back_from_aside`): the
    steps in it have their ops in the program's profile, not in opscope's."""
    marks = _marks()
    if marks is not None and marks.aside_begin is not None:
        _guarded(marks.aside_begin, framework.encode(), ("opscope stood aside for " + what).encode())
    try:
        notes = os.path.join(_SESSION, ".opscope", "aside-%d.txt" % os.getpid())
        where = os.path.abspath(os.fspath(where)) if where else ""
        with open(notes, "a") as f:
            f.write("%s\t%s\t%s\n" % (framework, what, where.replace("\t", " ").replace("\n", " ")))
    except Exception:
        pass


def _back_from_aside(framework):
    """Ends the time `_note_aside` marked: opscope records again."""
    marks = _marks()
    if marks is not None and marks.aside_end is not None:
        _guarded(marks.aside_end, framework.encode())


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
            _back_from_aside("torch")
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


def _label_ranks(torch):
    """A process that `torch.multiprocessing.spawn` starts is given its rank as an
    argument, not in `RANK`: once `init_process_group` has set the group up, the rank
    and world size it was given label the process's file, as `RANK` would have."""
    library = os.environ.get("INTEL_LIBITTNOTIFY64")
    dist = getattr(torch, "distributed", None)
    if not library or dist is None:
        return
    try:
        import ctypes
        import functools

        if not dist.is_available():
            return
        import torch.distributed.distributed_c10d as c10d

        label = ctypes.CDLL(library).opscope_record_label
        label.argtypes = [ctypes.c_char_p]
        label.restype = None
        real = c10d.init_process_group
    except Exception:
        return

    @functools.wraps(real)
    def init_process_group(*args, **kwargs):
        result = real(*args, **kwargs)
        try:
            label(b"rank=%d" % dist.get_rank())
            label(b"world_size=%d" % dist.get_world_size())
        except Exception:
            pass
        return result

    for module in (dist, c10d):
        if getattr(module, "init_process_group", None) is real:
            module.init_process_group = init_process_group


def _on_torch(torch):
    if not hasattr(torch.autograd.profiler, "emit_itt"):
        return
    modes = _TorchModes(torch)
    modes.patch(torch)
    modes.start()
    _mark_profiler_steps(torch, modes)
    _mark_ranges_while_aside(torch, modes)
    _warm_up(torch)
    _label_ranks(torch)
    import atexit

    def stop_at_exit():
        if modes.context is not None:
            modes.stop()

    atexit.register(stop_at_exit)


def _mark_ranges_while_aside(torch, modes):
    """The program's `record_function` ranges reach opscope through emit_itt too, so
    while opscope stands aside for the program's profiler it marks them itself (category
    `opscope`): a program whose steps are ranges of its own (`train_step_6`) keeps them.
    `ProfilerStep#N` is `_mark_profiler_steps`'s. A range that was open when opscope
    stood aside, or came back, is left as emit_itt has it."""
    import threading

    marks = _marks()
    record_function = getattr(torch.autograd.profiler, "record_function", None)
    real_enter = getattr(record_function, "__enter__", None)
    real_exit = getattr(record_function, "__exit__", None)
    if marks is None or real_enter is None or getattr(real_enter, "_opscope", False):
        return

    def open_mark(rf):
        name = getattr(rf, "name", None)
        if isinstance(name, str) and not name.startswith("ProfilerStep#"):
            marks.begin(b"opscope", name.encode("utf-8", "replace"))
            rf._opscope_open = True

    def close_mark(rf):
        rf._opscope_open = False
        marks.end()

    def enter(self):
        result = real_enter(self)
        # On emit_itt's thread only, as emit_itt would have.
        if modes.aside and threading.get_ident() == modes.thread:
            _guarded(open_mark, self)
        return result

    def exit(self, *args):
        try:
            return real_exit(self, *args)
        finally:
            if getattr(self, "_opscope_open", False):
                _guarded(close_mark, self)

    enter._opscope = True
    record_function.__enter__, record_function.__exit__ = enter, exit


def _mark_profiler_steps(torch, modes):
    """torch.profiler's `ProfilerStep#N` ranges reach opscope through emit_itt, which
    stands aside while the program's profiler records: opscope marks those steps itself
    then (same name, category `opscope`), so that no step of the program goes missing.
    The step `step()` opens last and `stop()` closes at once is the analysis's to drop."""
    marks = _marks()
    profile = getattr(getattr(torch, "profiler", None), "profile", None)
    if marks is None or profile is None or getattr(profile.step, "_opscope", False):
        return
    real_start, real_step, real_stop = profile.start, profile.step, profile.stop

    def close(prof):
        if getattr(prof, "_opscope_step_open", False):
            prof._opscope_step_open = False
            marks.end()

    def open_if_aside(prof):
        if modes.aside and getattr(prof, "record_steps", True):
            marks.begin(b"opscope", ("ProfilerStep#%d" % prof.step_num).encode())
            prof._opscope_step_open = True

    def start(self, *args, **kwargs):
        result = real_start(self, *args, **kwargs)
        _guarded(open_if_aside, self)
        return result

    def step(self, *args, **kwargs):
        _guarded(close, self)
        result = real_step(self, *args, **kwargs)
        _guarded(open_if_aside, self)
        return result

    def stop(self, *args, **kwargs):
        _guarded(close, self)
        return real_stop(self, *args, **kwargs)

    step._opscope = True
    profile.start, profile.step, profile.stop = start, step, stop


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

    def before_program_starts(self, what, why="profiler", where=None):
        if self.running:
            self.running = False
            self.aside.add(why)
            _note_aside(self.framework, what, where)
            self.stop_ours()
        elif self.aside:
            self.aside.add(why)

    def after_program_stopped(self, why="profiler"):
        if why in self.aside:
            self.aside.discard(why)
            if self.aside:
                return
            _back_from_aside(self.framework)
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
        """The program's start and stop of the profiler, around opscope's; each marked
        on the calling thread (`jax.profiler start (the program's)`): where the
        program's profile begins and ends, and what its start and stop cost."""
        tsl = self
        marks = _marks()
        started = ("%s start (the program's)" % what).encode()
        stopped = ("%s stop (the program's)" % what).encode()

        def program_start(*args, **kwargs):
            where = args[0] if args else kwargs.get("log_dir", kwargs.get("logdir"))
            tsl.before_program_starts(what, where=where if isinstance(where, (str, os.PathLike)) else None)
            if marks is not None:
                marks.begin(b"opscope", started)
            try:
                return start(*args, **kwargs)
            except BaseException:
                tsl.after_program_stopped()  # it never ran: opscope's goes on
                raise
            finally:
                if marks is not None:
                    marks.end()

        def program_stop(*args, **kwargs):
            if marks is not None:
                marks.begin(b"opscope", stopped)
            try:
                return stop(*args, **kwargs)
            finally:
                if marks is not None:
                    marks.end()
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
        _tsl.own("jax", _jax_start(jax, start), lambda: stop())
    _mark_jax_calls(jax)


def _jax_start(jax, start):
    """Starts JAX's profiler as `jax.profiler.start_trace` does, but without its Python
    tracer, which records every Python call of the program (most of what recording
    JAX cost: 0.5 s of a 2.3 s run); the steps come from the calls marked below."""
    try:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
    except Exception:
        return lambda logdir: start(logdir)

    def start_without_python(logdir):
        try:
            return start(logdir, profiler_options=options)
        except TypeError:  # a JAX whose start_trace takes no options
            return start(logdir)

    return start_without_python


class _MarkedJit(object):
    """What `jax.jit` gives the program under `opscope record`: the jitted function
    itself, each call marked `jax call NAME`. JAX's profile records the calls too, but
    only while opscope's profiler runs, and only when it stops: the marks give the
    steps while the program's own profiler runs and to the live stream. Everything
    but the call is the jitted function's (`lower`, `trace`, `eval_shape`, binding as
    a method)."""

    def __init__(self, jitted, marks):
        import functools

        functools.update_wrapper(self, jitted, updated=())
        self.__wrapped__ = jitted
        name = getattr(jitted, "__name__", None) or "jit"
        self._opscope = (marks.begin, marks.end, jitted, ("jax call " + name).encode())

    def __call__(self, *args, **kwargs):
        begin, end, jitted, name = self._opscope
        begin(b"opscope", name)
        try:
            return jitted(*args, **kwargs)
        finally:
            end()

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        import types

        return types.MethodType(self, instance)

    def __getattr__(self, name):
        try:
            wrapped = self.__dict__["__wrapped__"]
        except KeyError:  # not made by __init__ (a copy being built)
            raise AttributeError(name)
        return getattr(wrapped, name)

    def __repr__(self):
        return repr(self.__wrapped__)


def _mark_jax_calls(jax):
    marks = _marks()
    real_jit = getattr(jax, "jit", None)
    if marks is None or real_jit is None or getattr(real_jit, "_opscope", False):
        return

    def mark(jitted):
        return _MarkedJit(jitted, marks) if callable(jitted) else jitted

    def jit(*args, **kwargs):
        made = real_jit(*args, **kwargs)
        if not args and "fun" not in kwargs:
            # `jax.jit(static_argnums=…)`: a decorator still to be applied.
            def decorate(fun, *a, **k):
                return mark(made(fun, *a, **k))

            return decorate
        return mark(made)

    import functools

    functools.update_wrapper(jit, real_jit)
    jit._opscope = True
    jax.jit = jit


def _on_keras_trainer(trainer):
    """Marks each call of Keras's train function (TensorFlow backend) as a range
    `keras train_function call` (category `opscope`) on the calling thread: the step
    TensorFlow's own profile records in its XPlane, which is written only when the
    profiler stops, so the live stream (`opscope agent`) would not see the steps
    without it. In the session, `steps` prefers TensorFlow's record of the call."""
    marks = _marks()
    if marks is None:
        return
    begin, end = marks.begin, marks.end
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


def _on_keras_callbacks(callback_list):
    """Marks each batch of Keras's `fit` as a range `keras train step` (category
    `opscope`), from the batch's `on_train_batch_begin` to the return of its
    `on_train_batch_end`: the step as the fit loop runs it, the callbacks' work
    included, with any backend. A batch whose end never comes (the train function
    raised) is closed when the next begins or when training ends."""
    marks = _marks()
    cls = getattr(callback_list, "CallbackList", None)
    if marks is None or cls is None or getattr(cls.on_train_batch_begin, "_opscope", False):
        return
    real_begin, real_end, real_train_end = (
        cls.on_train_batch_begin,
        cls.on_train_batch_end,
        cls.on_train_end,
    )
    open_batch = threading.local()

    def close():
        if getattr(open_batch, "open", False):
            open_batch.open = False
            marks.end()

    def open_():
        close()
        marks.begin(b"opscope", b"keras train step")
        open_batch.open = True

    def on_train_batch_begin(self, *args, **kwargs):
        _guarded(open_)
        return real_begin(self, *args, **kwargs)

    def on_train_batch_end(self, *args, **kwargs):
        try:
            return real_end(self, *args, **kwargs)
        finally:
            _guarded(close)

    def on_train_end(self, *args, **kwargs):
        _guarded(close)
        return real_train_end(self, *args, **kwargs)

    on_train_batch_begin._opscope = True
    cls.on_train_batch_begin = on_train_batch_begin
    cls.on_train_batch_end = on_train_batch_end
    cls.on_train_end = on_train_end


_HOOKS = {
    "torch": _on_torch,
    "tensorflow": _on_tensorflow,
    "jax": _on_jax,
    # Keras 3's TensorFlow trainer (imported while TensorFlow is, so hooked by its own
    # name: Keras itself is not finished importing when TensorFlow imports it).
    "keras.src.backend.tensorflow.trainer": _on_keras_trainer,
    "keras.src.callbacks.callback_list": _on_keras_callbacks,
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
