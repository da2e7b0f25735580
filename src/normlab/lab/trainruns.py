"""The /train page's live runs: one training session (or two, compared), driven by one stream.

A :class:`Run` holds one :class:`~normlab.trainview.Session` per side (``a``; in compare mode
``b`` too, on the same data and seed) and what its page asked of it (play, pause, step, reset),
and :meth:`Run.events` is its event stream: the points first, then frames while it plays, at
most ``fps`` a second and ``speed`` optimizer steps apart. The sides step in lockstep, and an
action is taken at the next step, never inside one: a frame's steps stop as soon as an action
is asked (a pause at 50 steps a frame stops after the step in progress, not 49 later), and a
closed run stops there too. Every step and
frame is computed in a worker thread of the lab's run manager
(:meth:`~normlab.lab.runner.Runner.in_session_thread`), so the event loop keeps serving pages
while the runs train. The manager bounds the runs too: each holds a place while its sessions
are built (:meth:`~normlab.lab.runner.Runner.book`), then its slot
(:meth:`~normlab.lab.runner.Runner.admit`) until the stream ends (the client went, its page
opened a new run in its place, or the lab stops: :meth:`~normlab.lab.runner.Runner.cancel`).
A build takes no lock: each session draws from a generator of its own
(:func:`normlab.trainview.build`), so a stream never waits for an experiment run.

Events, each ``data`` one line of JSON, keyed by side where a side has its own:

- ``run``: ``{"run", "control", "sides", "setup", "data", "max_steps"}``, once: the run's id,
  the URL of its control, the sides, each side's validated setup and
  :meth:`~normlab.trainview.Session.data`;
- ``replay``: ``{"step", "of"}`` while a link's step count is replayed, every
  :data:`REPLAY_CHUNK` steps;
- ``history``: each side's :attr:`~normlab.trainview.Session.losses`, once a replay has
  ended (the curves up to there);
- ``frame``: each side's :meth:`~normlab.trainview.Session.frame`, after the replay, then
  one per frame, with the figures its page draws (:meth:`Run._frames`);
- ``stats``: each side's layer figures and table (as a frame's ``stats``), once a run that
  played pauses, when its last frame went without them;
- ``status``: ``{"playing", "step", "speed", "fps"}``, whenever one of them was changed;
- ``reset``: ``{"step": 0}``, before the frame of a run put back to step 0.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from normlab.experiments.base.params import param, parameters_of
from normlab.lab import sse
from normlab.trainview import Session, Setup
from normlab.trainview.figures import History, layer_table, live_figure, stats_figures

MAX_STEPS = 2000
"""The most steps a stream replays before its first frame (a shared link's step count)."""
MAX_SPEED = 50
"""The most optimizer steps between two frames."""
MAX_FPS = 60
"""The highest frame rate a stream may ask for."""
MAX_ASKED = 64
"""Actions waiting for a run's next step; one more is refused (429)."""
REPLAY_CHUNK = 25
"""Steps replayed between two looks at whether the client is still there."""
POLL_S = 0.25
"""How often an idle run looks whether it was asked to end (the lab stopping, a new run)."""
STATS_S = 1.0
"""While a run plays, its layers' figures and table go with a frame at most this often (they
weigh the most, and cost the page the most to draw)."""

ACTIONS = ("play", "pause", "step", "reset")
T = TypeVar("T")


@dataclass(frozen=True)
class Play:
    """How a stream plays: declared once, so the query is validated like the setup."""

    steps: int = param(
        0, "steps to train before the first frame (a link's step count, replayed)",
        min=0, max=MAX_STEPS, step=1,
    )  # fmt: skip
    speed: int = param(1, "optimizer steps per frame while playing", min=1, max=MAX_SPEED, step=1)
    fps: int = param(30, "frames per second at most while playing", min=1, max=MAX_FPS, step=1)
    play: bool = param(False, "play at once (else wait for a play action)")
    compare: bool = param(
        False, "train a second setup beside the first, in lockstep (its settings as b.NAME)"
    )


PLAY = parameters_of(Play)
"""The stream's own parameters, beside the setup's."""


class InThread(Protocol):
    """Awaits ``fn(*args)`` computed in a worker thread, as
    :meth:`~normlab.lab.runner.Runner.in_session_thread` does."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


class Run:
    """One live training run: its sessions, what its page asked, how fast it plays.

    Args:
        setups: the validated setup of each side (the sessions are built by :meth:`start`).
        play: the stream's settings.
        in_thread: where its steps and frames are computed: the lab's run manager's threads
            (:meth:`~normlab.lab.runner.Runner.in_session_thread`).
    """

    def __init__(self, setups: Mapping[str, Setup], play: Play, in_thread: InThread) -> None:
        self.id = secrets.token_urlsafe(12)  # unguessable: only its page can steer it
        self.setups = dict(setups)
        self.sessions: dict[str, Session] = {}
        self.points: dict[str, dict[str, Any]] = {}  # each side's Session.data(), made once
        self.histories = {k: History() for k in self.setups}  # what each side's curves show
        self._stats_at, self._stats_step = -float("inf"), -1  # when, and of which step, sent
        self.steps, self.speed, self.fps, self.playing = play.steps, play.speed, play.fps, False
        self.play_at_once = play.play
        self.asked: deque[str] = deque()
        self.closed = False
        self._wake: anyio.Event | None = None  # made, set and awaited in the event loop only
        self._loop_thread = threading.get_ident()
        self._in_thread = in_thread

    @property
    def control(self) -> str:
        return f"/api/train/{self.id}/control"

    @property
    def step_count(self) -> int:
        return min((s.step_count for s in self.sessions.values()), default=0)

    def build(self) -> None:
        """Build the sessions (the data and the initial weights): in a worker thread. It takes
        no lock (each session draws from a generator of its own), so it waits on nothing."""
        self.sessions = {k: Session(v) for k, v in self.setups.items()}
        # the points never change within a run (a reset draws the same ones): listed once,
        # not at every frame
        self.points = {k: s.data() for k, s in self.sessions.items()}

    async def start(self) -> None:
        """:meth:`build` in a worker thread of the run's."""
        await self._in_thread(self.build)

    def ask(self, action: str | None, speed: int | None = None, fps: int | None = None) -> None:
        """Queue ``action`` for the next step; a new ``speed`` or ``fps`` holds from the next
        frame. Raises :class:`OverflowError` when :data:`MAX_ASKED` actions wait already."""
        if action is not None and len(self.asked) >= MAX_ASKED:
            raise OverflowError(f"{MAX_ASKED} actions wait for this run's next step already")
        self.speed = self.speed if speed is None else speed
        self.fps = self.fps if fps is None else fps
        if action is not None:
            self.asked.append(action)
        self._woken().set()

    def close(self) -> None:
        """End the stream at its next look (within :data:`POLL_S`, or after its step); from
        any thread (an anyio event is woken from the event loop's own only)."""
        self.closed = True
        if threading.get_ident() == self._loop_thread:
            self._woken().set()

    def _woken(self) -> anyio.Event:
        if self._wake is None:
            self._wake = anyio.Event()
        return self._wake

    def _train(self, steps: int, stop: Callable[[], bool] | None = None) -> int:
        """Up to ``steps`` steps of every side, in lockstep; only the last is measured (the
        frame shows it). Before each step it looks whether the run was closed, or ``stop()``
        says so: a run ends (or pauses) at its next step, not after its frame's ``steps``.
        Returns the steps taken."""
        for k in range(steps):
            if self.closed or (stop is not None and stop()):
                return k
            for session in self.sessions.values():  # each its own generator: no order matters
                session.step(measure=k == steps - 1)
        return steps

    def _frames(self) -> dict[str, Any]:
        """Each side's frame, added to its :class:`~normlab.trainview.figures.History`, with
        what its page draws: ``figures``, the boundary and the losses
        (:func:`~normlab.trainview.figures.live_figure`) and, unless the run plays and sent
        them less than :data:`STATS_S` ago, ``stats`` (:meth:`_stats`).

        What goes over the wire is bounded per frame and side, whatever the run's length: the
        frame (GRID x GRID probabilities, a row per layer, 2 x depth x HIST_BINS counts), the
        figure (the grid again, 3 numbers a point, 2 curves of at most ``MAX_POINTS`` points)
        and the stats (a curve of at most ``MAX_POINTS`` points per layer and per weight
        layer, 2 x depth heat maps of HIST_BINS x ``MAX_COLUMNS``, the table)."""
        due = not self.playing or time.monotonic() - self._stats_at >= STATS_S
        out: dict[str, Any] = {}
        for k, s in self.sessions.items():
            frame = s.frame()
            self.histories[k].add(frame)
            figure = live_figure(self.histories[k], self.points[k])
            out[k] = {**frame, "figures": [figure.to_dict()]}
        if due:
            for k, stats in self._stats().items():
                out[k]["stats"] = stats
        return out

    def _stats(self) -> dict[str, Any]:
        """Each side's layer figures (:func:`~normlab.trainview.figures.stats_figures`) and
        table, at the step of its last frame."""
        self._stats_at, self._stats_step = time.monotonic(), self.step_count
        return {
            k: {
                "step": h.last["step"],
                "figures": [f.to_dict() for f in stats_figures(h)],
                "tables": [layer_table(h.last).to_dict()],
            }
            for k, h in self.histories.items()
            if h.last is not None
        }

    def _advance(self, steps: int) -> dict[str, Any]:
        self._train(steps)
        return self._frames()

    def _play(self) -> dict[str, Any] | None:
        """A playing run's frame: :attr:`speed` steps, or fewer once an action is asked (read
        between two steps, from this worker thread: the deque is only appended to). A frame
        cut short measures the weights it stopped at (:meth:`~normlab.trainview.Session.look`);
        ``None`` when no step was taken or the run was closed: nothing to show."""
        speed = self.speed
        taken = self._train(speed, stop=lambda: bool(self.asked))
        if taken == 0 or self.closed:
            return None
        if taken < speed:
            for session in self.sessions.values():
                session.look()
        return self._frames()

    def _reset(self) -> dict[str, Any]:
        for session in self.sessions.values():
            session.reset()
        for history in self.histories.values():
            history.clear()
        return self._frames()

    async def _rest(self, seconds: float) -> None:
        """Wait up to ``seconds``, less once asked something or closed."""
        with anyio.move_on_after(max(seconds, 0.0)):
            while not (self.asked or self.closed):
                with anyio.move_on_after(POLL_S):  # a close from another thread wakes no one
                    await self._woken().wait()
                if self._woken().is_set():
                    self._wake = None

    def status(self) -> str:
        state = {"playing": self.playing, "step": self.step_count, "speed": self.speed}
        return sse.event("status", {**state, "fps": self.fps})

    def _first(self) -> dict[str, Any]:
        return {
            "run": self.id,
            "control": self.control,
            "sides": list(self.sessions),
            "setup": {k: dataclasses.asdict(v) for k, v in self.setups.items()},
            "data": self.points,
            "max_steps": MAX_STEPS,
        }

    async def events(self, gone: Callable[[], Awaitable[bool]]) -> AsyncIterator[str]:
        """The built run's stream: the points, a replay when asked, then frames until it
        ends."""
        yield sse.event("run", self._first())
        async for chunk in self._replay(gone):
            yield chunk
        yield sse.event("frame", await self._in_thread(self._frames))
        self.playing = self.play_at_once
        yield self.status()
        quiet = time.monotonic()
        while not self.closed and not await gone():
            async for chunk in self._turn():
                quiet = time.monotonic()
                yield chunk
            if time.monotonic() - quiet >= sse.KEEPALIVE_S:
                quiet = time.monotonic()
                yield sse.comment("still training")

    async def _replay(self, gone: Callable[[], Awaitable[bool]]) -> AsyncIterator[str]:
        """Train the link's step count, telling how far it got, then send the curves."""
        while self.step_count < self.steps and not self.closed and not await gone():
            await self._in_thread(self._train, min(REPLAY_CHUNK, self.steps - self.step_count))
            yield sse.event("replay", {"step": self.step_count, "of": self.steps})
        if self.steps:
            losses = {k: s.losses for k, s in self.sessions.items()}
            for k, history in self.histories.items():
                history.losses(losses[k])
            yield sse.event("history", losses)

    async def _turn(self) -> AsyncIterator[str]:
        """One turn of the loop: the oldest action asked, else a frame, else a rest."""
        if self.asked:
            async for chunk in self._act(self.asked.popleft()):
                yield chunk
        elif self.playing:
            started = time.monotonic()
            frames = await self._in_thread(self._play)
            if frames is not None:
                yield sse.event("frame", frames)
            await self._rest(1 / self.fps - (time.monotonic() - started))
        else:
            await self._rest(sse.KEEPALIVE_S)

    async def _act(self, action: str) -> AsyncIterator[str]:
        if action in ("play", "pause"):
            self.playing = action == "play"
            yield self.status()
            if not self.playing and self._stats_step != self.step_count:  # catch up
                yield sse.event("stats", await self._in_thread(self._stats))
        elif action == "step":  # exactly one step; a playing run pauses first
            self.playing = False
            frames = await self._in_thread(self._advance, 1)
            yield self.status()
            yield sse.event("frame", frames)
        elif action == "reset":  # back to step 0 (the same data and weights), paused
            self.playing = False
            frames = await self._in_thread(self._reset)
            yield sse.event("reset", {"step": 0})
            yield self.status()
            yield sse.event("frame", frames)
