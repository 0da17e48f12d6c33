"""Start the app: command line, logging, QApplication, exception hook, screenshot mode.

`gpt-explorer` / `python -m explorer` open the window at once and load the default model
(GPT-2 small, or an untrained model of its shape when the weights cannot be had) in the
background. `--screenshot OUT.png` renders one panel offscreen once its data is ready.
"""
from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import sys
import tempfile
import time
from pathlib import Path

_STARTED = time.perf_counter()
log = logging.getLogger("explorer")

LOG_MAX_BYTES = 1_000_000
LOG_BACKUPS = 3
LOAD_TIMEOUT_S = 600
READY_TIMEOUT_S = 120
DEFAULT_SIZE = "1280x820"
QUIT_WAIT_MS = 800  # cooperative tasks stop within one step (~40 ms on GPT-2 small); slower ones are abandoned


def parse_args(argv=None) -> argparse.Namespace:
    from explorer.shell.registry import panel_names

    p = argparse.ArgumentParser(prog="gpt-explorer", description="Look inside GPT-2-class models while they run.")
    p.add_argument("--model", metavar="SOURCE",
                   help="hub id (gpt2, gpt2-medium, …), Hugging Face folder, .safetensors file or nanoGPT ckpt.pt "
                        "(default: GPT-2 small if it can be had, else an untrained model of its shape)")
    p.add_argument("--n-head", type=int, metavar="N",
                   help="attention heads of a --model file that does not record them (the book's model.pth); "
                        "without it the window asks, and --screenshot exits 2")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the model runs")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                   help="generation precision: bf16 runs generation from a bf16 copy of the weights (memory beside "
                        "the fp32 ones) wherever streamed tokens are measured faster in bf16 (a short stream timed "
                        "once per machine, torch and model shape; refused with both speeds where slower); every "
                        "other panel stays fp32 (also in the View menu, with the speeds and the copy's memory)")
    p.add_argument("--panel", choices=panel_names(), help="panel to show first")
    p.add_argument("--prompt", help="initial prompt for the panels that take one")
    p.add_argument("--run", metavar="DIR", help="a training run folder (python -m gptcore.train's --out_dir): its "
                                                "latest kept step is the model every panel shows, and the Train "
                                                "panel follows or replays it (shown first unless --panel says)")
    p.add_argument("--screenshot", metavar="OUT.png", help="render --panel offscreen into a PNG and exit")
    p.add_argument("--theme", default="system", choices=["system", "light", "dark"],
                   help="colours: follow the system (default) or force light/dark")
    p.add_argument("--size", metavar="WxH",
                   help="window size (default: the size it had when last closed, or 1280x820)")
    p.add_argument("--exit-after-paint", action="store_true", help=argparse.SUPPRESS)  # launch-time measurement
    args = p.parse_args(argv)
    try:
        w, h = (int(v) for v in (args.size or DEFAULT_SIZE).lower().split("x"))
        if not (200 <= w <= 8000 and 150 <= h <= 8000):
            raise ValueError
    except ValueError:
        p.error(f"--size {args.size!r}: use WIDTHxHEIGHT in pixels, e.g. 1280x820 (200–8000 wide, 150–8000 high)")
    args.size_wh = (w, h) if args.size else None  # None: the saved geometry (screenshots: DEFAULT_SIZE)
    if args.n_head is not None and (args.n_head < 1 or not args.model):
        p.error(f"--n-head {args.n_head}: give a positive head count, with the --model file it is for")
    if args.run is not None and not os.path.isdir(args.run):
        p.error(f"--run {args.run!r}: no such folder; give the --out_dir of a run started by python -m gptcore.train")
    if args.run and not args.panel:
        args.panel = "train"
    if args.screenshot and not args.panel:
        args.panel = "config"
    return args


def log_dir() -> Path:
    from gptcore.io.user_dirs import user_dir

    return user_dir("log", "gpt-explorer")


_HANDLERS: list[logging.Handler] = []


class _OneLineFormatter(logging.Formatter):
    """For the console: the message only; tracebacks go to the log file."""

    def format(self, record: logging.LogRecord) -> str:
        return f"gpt-explorer: {record.getMessage()}"


LOGGERS = ("explorer", "gptcore")  # the app's own lines and gptcore's (e.g. the oneDNN fallback)


def teardown_logging() -> None:
    """Remove (and close) the handlers setup_logging added."""
    while _HANDLERS:
        handler = _HANDLERS.pop()
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(handler)
        handler.close()


def setup_logging() -> Path | None:
    """A rotating log file in the user's standard log directory (size-capped), plus stderr."""
    teardown_logging()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = None
    try:
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "gpt-explorer.log"
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS,
                                                       encoding="utf-8")
        handler.setFormatter(fmt)
        for logger in loggers:
            logger.addHandler(handler)
        _HANDLERS.append(handler)
    except OSError as exc:  # a read-only home must not stop the app
        print(f"gpt-explorer: cannot write a log file ({exc}); logging to stderr only", file=sys.stderr)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    console.setFormatter(_OneLineFormatter())
    for logger in loggers:
        logger.addHandler(console)
    _HANDLERS.append(console)
    return path


def install_exception_hook(window_getter) -> None:
    """Uncaught exceptions (e.g. in a slot) become an error dialog and a log line; the loop goes on."""

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        exc.__traceback__ = tb
        window = window_getter()
        if window is not None:
            window.ctx.report_error(exc, "Unexpected error", inline=False)
        else:
            from explorer.controllers.errors import log_exception

            log_exception("Unexpected error", exc)

    sys.excepthook = hook


def _wait(app, predicate, timeout_s: float) -> bool:
    """Run the event loop until predicate() is true or the time is up."""
    from PySide6.QtCore import QEventLoop, QThread

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        QThread.msleep(5)
    return True


def apply_size(window, args) -> None:
    """`--size` wins over the geometry saved when the window last closed, in every mode;
    screenshots without one use DEFAULT_SIZE (never the user's saved layout)."""
    if args.size_wh is not None:
        window.resize(*args.size_wh)
    elif args.screenshot or args.exit_after_paint:
        window.resize(*(int(v) for v in DEFAULT_SIZE.split("x")))


def prompt_problem(session, prompt: str | None) -> str | None:
    """Why the loaded model cannot read `prompt` (its tokenizer refuses it, e.g. text for a model
    whose tokens are numbers, or an id lies outside its vocabulary), or None when it can."""
    if not prompt:
        return None
    try:
        session.check_token_ids(session.encode(prompt))
    except ValueError as exc:
        return str(exc)
    return None


def take_screenshot(app, window, runner, panel_name: str, out: str, prompt: str | None = None) -> int:
    """Wait for the model and the panel's first data, grab the window, write the PNG. A --prompt
    the model cannot encode exits 2 at once with the reason: no panel would ever get data."""
    from explorer.runtime.workers import MODEL_TASK

    if not _wait(app, lambda: window.session is not None and not runner.is_running(MODEL_TASK), LOAD_TIMEOUT_S):
        print(f"gpt-explorer: the model did not load within {LOAD_TIMEOUT_S} s", file=sys.stderr)
        return 3
    if window.errors_shown or window.session is None or not window.session.has_model:
        for title, message in window.errors_shown or [("No model", "the model could not be loaded")]:
            print(f"gpt-explorer: {title}: {message}", file=sys.stderr)
        return 2
    problem = prompt_problem(window.session, prompt)
    if problem:
        print(f"gpt-explorer: --prompt {prompt!r} cannot be read by {window.session.info.name}: {problem}",
              file=sys.stderr)
        return 2
    ready = []
    panel = window.show_panel(panel_name)
    panel.dataReady.connect(lambda *a: ready.append(True))
    if panel.is_ready:
        ready.append(True)
    if not _wait(app, lambda: bool(ready) or bool(window.errors_shown), READY_TIMEOUT_S):
        print(f"gpt-explorer: panel {panel_name!r} had no data after {READY_TIMEOUT_S} s", file=sys.stderr)
        return 3
    _wait(app, lambda: False, 0.3)  # let the last paints and layouts settle
    if window.errors_shown:
        for title, message in window.errors_shown:
            print(f"gpt-explorer: {title}: {message}", file=sys.stderr)
        return 2
    image = window.grab()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    if image.isNull() or not image.save(out, "PNG"):
        print(f"gpt-explorer: could not write {out}", file=sys.stderr)
        return 4
    print(f"wrote {out} ({image.width()}×{image.height()}, panel {panel_name}, model {window.session.info.name})")
    return 0


OFFSCREEN_NOISE = ("This plugin does not support propagateSizeHints()",)  # Qt's offscreen platform, per window


def quiet_offscreen_warnings() -> None:
    """The offscreen platform (screenshots) warns that it cannot pass size hints to a window manager
    it does not have, once per top-level window: noise, not a problem of ours. Everything else Qt
    says goes to stderr as before."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(_mode, _context, message: str) -> None:
        if message not in OFFSCREEN_NOISE:
            print(message, file=sys.stderr)

    qInstallMessageHandler(handler)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.screenshot or args.exit_after_paint:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from explorer.shell.platform_check import xcb_problem

    problem = xcb_problem()  # before Qt, which would abort with its own words
    if problem:
        print(problem, file=sys.stderr)
        return 2
    log_path = setup_logging()

    from PySide6.QtCore import QEvent, QObject, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    import explorer.widgets.theme as theme
    import explorer.widgets.wheel_guard as wheel_guard
    from explorer.shell.window import MainWindow
    from explorer.runtime.gui_gc import GuiThreadCollector
    from explorer.runtime.workers import TaskRunner

    if os.environ.get("QT_QPA_PLATFORM") == "offscreen":
        quiet_offscreen_warnings()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    GuiThreadCollector(app)  # cyclic garbage (Qt objects among it) is freed on this thread only
    app.setApplicationName("GPT Explorer")
    app.setOrganizationName("gpt-explorer")
    theme.apply_theme(app, None if args.theme == "system" else args.theme)
    wheel_guard.install(app)  # the wheel scrolls forms; it edits a field only once it was clicked
    if args.device == "cuda":  # only an explicit request pays for importing torch before the first paint
        from explorer.runtime.devices import resolve_device

        try:
            resolve_device("cuda")
        except ValueError as exc:
            print(f"gpt-explorer: {exc}", file=sys.stderr)
            return 2
    runner = TaskRunner()
    settings = None
    if args.screenshot:  # screenshots do not depend on, or change, the user's saved layout
        settings = QSettings(os.path.join(tempfile.mkdtemp(prefix="gpt-explorer-"), "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(None, runner, settings=settings, prompt=args.prompt, panel=args.panel,
                        log_path=str(log_path) if log_path else None)
    window.auto_download = not args.screenshot  # a screenshot uses what is here, never waits on the network
    window.fall_back_on_failed_start = not args.screenshot  # a screenshot of a bad --model exits 2 instead
    window.ask_head_count = not args.screenshot  # nobody to ask: the error names --n-head, exit 2
    if args.run:  # the Train panel follows it; the panel --panel chose (Train by default) stays in front
        window.open_run(args.run, show=False)
    holder = {"window": window}
    install_exception_hook(lambda: holder.get("window"))
    apply_size(window, args)

    class FirstPaint(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint and obj is window:
                window.removeEventFilter(self)
                elapsed = time.perf_counter() - _STARTED
                log.info("first paint %.2f s after start", elapsed)
                if args.exit_after_paint:
                    print(f"first paint after {elapsed:.3f} s (from importing explorer.app)")
                    QTimer.singleShot(0, window.close)
            return False

    logged_ready = []  # the first model only: later swaps are not start-up

    def model_ready() -> None:
        if window.session is not None and window.session.has_model and not logged_ready:
            logged_ready.append(time.perf_counter() - _STARTED)
            log.info("model ready %.2f s after start: %s", logged_ready[0], window.session.info.name)

    window.modelChanged.connect(model_ready)
    first_paint = FirstPaint()
    window.installEventFilter(first_paint)
    window.show()
    if not args.exit_after_paint:
        QTimer.singleShot(0, lambda: window.start(args.model, args.device, n_head=args.n_head, dtype=args.dtype,
                                                  run=args.run))

    if args.screenshot:
        code = take_screenshot(app, window, runner, args.panel, args.screenshot, args.prompt)
        window.close()
    else:
        app.exec()
        code = 0
    holder.clear()
    return _finish(runner, code)


def _finish(runner, code: int) -> int:
    """Wait briefly for background work; a task stuck in I/O must not keep the process alive."""
    t0 = time.perf_counter()
    drained = runner.wait_all(QUIT_WAIT_MS) and runner.stop(QUIT_WAIT_MS)
    log.info("quit: background work %s after %.2f s", "drained" if drained else "abandoned", time.perf_counter() - t0)
    if drained:
        logging.shutdown()
        return code
    log.warning("exiting with background work still running (it ignored cancellation)")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
