"""The TensorBoard plugin: a ``rooflens`` tab (entry point group ``tensorboard_plugins``).

Routes, under ``/data/plugin/rooflens/``:

* ``/index.js``: the tab's ES module (TensorBoard loads it in an iframe and calls ``render()``): the
  runs on the left, the chosen run's report beside them; no network beyond this server;
* ``/runs``: the profile runs under the logdir, as JSON (``[{"run": name}, …]``);
* ``/report?run=RUN``: the report page of run RUN, built on first view and cached.

A bad run gives one sentence on a page with a 4xx status, never a traceback. ``run`` is looked up
among the runs found under the logdir, so it can name nothing outside it. Like TensorBoard's own
profile plugin, this one reads the logdir itself: start TensorBoard with ``--load_fast=false``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import time
from importlib import resources

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from rooflens.errors import RooflensError
from rooflens.tensorboard.runs import ReportCache, find_runs

PLUGIN_NAME = "rooflens"
#: how long a listing of the logdir's runs is reused by ``is_active`` (TensorBoard asks often)
ACTIVE_TTL_S = 30.0
_SCRIPT = re.compile(r"<script(?![^>]*\btype=\"application/json\")[^>]*>(.*?)</script>", re.S)


def script_hashes(page: str) -> list[str]:
    """The base64 SHA-256 of each inline script of ``page``: TensorBoard's Content-Security-Policy runs
    an inline script only when its hash is listed (JSON data blocks are not scripts)."""
    return [base64.b64encode(hashlib.sha256(s.encode("utf-8")).digest()).decode("ascii")
            for s in _SCRIPT.findall(page)]


def sentence_page(sentence: str) -> str:
    """A page that says one thing."""
    return ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>rooflens</title></head>'
            '<body style="font:14px/1.45 system-ui,sans-serif;margin:20px;color:#1d2330">'
            f'<p class="rooflens-error">{html.escape(sentence)}</p></body></html>\n')


class RooflensPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self._logdir = context.logdir or getattr(context.flags, "logdir", "") or ""
        self._cache = ReportCache()
        self._active: tuple[float, bool] = (0.0, False)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="rooflens")

    def is_active(self) -> bool:
        when, active = self._active
        if time.monotonic() - when > ACTIVE_TTL_S:
            active = bool(self._runs())
            self._active = (time.monotonic(), active)
        return active

    def get_plugin_apps(self):
        return {"/index.js": self._serve_index, "/runs": self._serve_runs, "/report": self._serve_report}

    def _runs(self) -> dict[str, str]:
        try:
            return find_runs(self._logdir)
        except RooflensError:
            return {}

    @wrappers.Request.application
    def _serve_index(self, request):
        js = (resources.files("rooflens.tensorboard") / "static" / "index.js").read_text(encoding="utf-8")
        return http_util.Respond(request, js, "application/javascript")

    @wrappers.Request.application
    def _serve_runs(self, request):
        runs = [{"run": name} for name in self._runs()]
        return http_util.Respond(request, json.dumps(runs), "application/json")

    @wrappers.Request.application
    def _serve_report(self, request):
        run = request.args.get("run")
        if not run:
            return self._sentence(request, "Give a run: /data/plugin/rooflens/report?run=RUN.", 400)
        run_dir = self._runs().get(run)
        if run_dir is None:
            return self._sentence(request, f"There is no profile run named {run!r} under the logdir.", 404)
        built = self._cache.get(run_dir)
        if built.error:
            return self._sentence(request, built.error, built.status)
        return http_util.Respond(request, built.html, "text/html", csp_scripts_sha256s=script_hashes(built.html))

    @staticmethod
    def _sentence(request, sentence: str, code: int):
        return http_util.Respond(request, sentence_page(sentence), "text/html", code=code)
