// The rooflens tab: TensorBoard imports this module in an iframe (base href plugin/rooflens/) and
// calls render(). Runs on the left; the chosen run's report page beside them. Only this server is
// asked for anything: ./runs and ./report?run=RUN.
export async function render() {
  const style = document.createElement("style");
  style.textContent = `
    body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330; }
    .rl { display: flex; height: 100vh; }
    .rl-runs { width: 260px; flex: none; overflow: auto; border-right: 1px solid #e4e7ec; padding: 12px; }
    .rl-runs h2 { font-size: 14px; margin: 0 0 8px; }
    .rl-run { display: block; width: 100%; text-align: left; border: 0; background: none; padding: 4px 6px;
              border-radius: 4px; cursor: pointer; font: inherit; word-break: break-all; }
    .rl-run:hover { background: #f5f8ff; } .rl-run.sel { background: #eef4ff; font-weight: 600; }
    .rl-main { flex: 1; display: flex; flex-direction: column; min-width: 0; }
    .rl-status { padding: 6px 12px; color: #667085; border-bottom: 1px solid #e4e7ec; }
    .rl-main iframe { flex: 1; border: 0; width: 100%; }`;
  document.head.append(style);
  const root = document.createElement("div"); root.className = "rl";
  const side = document.createElement("nav"); side.className = "rl-runs";
  const heading = document.createElement("h2"); heading.textContent = "Profile runs"; side.append(heading);
  const main = document.createElement("div"); main.className = "rl-main";
  const status = document.createElement("div"); status.className = "rl-status";
  const frame = document.createElement("iframe"); frame.title = "rooflens report";
  main.append(status, frame); root.append(side, main); document.body.append(root);

  function open(run, button) {
    side.querySelectorAll(".rl-run").forEach(b => b.classList.toggle("sel", b === button));
    status.textContent = "Reading " + run + " (built on first view, then cached)…";
    frame.onload = () => { status.textContent = run; };
    frame.src = "report?run=" + encodeURIComponent(run);
  }
  let runs = [];
  try {
    const r = await fetch("runs");
    runs = r.ok ? await r.json() : [];
  } catch (e) {
    status.textContent = "Could not list the runs: " + e;
    return;
  }
  if (!runs.length) {
    status.textContent = "No profile runs under the logdir (plugins/profile/<run>/ with *.xplane.pb or *.trace.json.gz).";
    return;
  }
  for (const {run} of runs) {
    const b = document.createElement("button"); b.className = "rl-run"; b.textContent = run;
    b.addEventListener("click", () => open(run, b)); side.append(b);
  }
  const last = side.querySelectorAll(".rl-run"); open(runs[runs.length - 1].run, last[last.length - 1]);
  document.body.dataset.rendered = "yes";
}
