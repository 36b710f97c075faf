// OpenTinker run viewer: vanilla JavaScript over the JSON API of tinker_client.viewer.app.
// No build step and nothing from a CDN. The page polls /api/runs and follows runs that still write.
// Everything a run's files hold (names, texts, statuses) is shown as text (el's "text",
// textContent), never parsed as HTML: no innerHTML anywhere.
"use strict";

const params = new URLSearchParams(location.search);
const POLL_MS = Math.max(100, Number(params.get("poll")) || 2000);
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const SVG = "http://www.w3.org/2000/svg";
const state = { runs: [], shown: new Set(), current: 0, metrics: {}, metric: null, tab: "curves", browsers: {} };

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
};
const svgEl = (tag, attrs = {}) => {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
};
const fmt = (v) => v === null || v === undefined ? "-" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : +v.toFixed(4) + "";
// A viewer the scheduler serves (/viewer/jobs/<id>/) takes the tenant's API key: asked for once
// (on the first 401) and kept in this tab's session storage; `opentinker view` needs none.
const KEY = "opentinker-api-key";
async function api(path) {
  const key = sessionStorage.getItem(KEY);
  const res = await fetch(path, key ? { headers: { Authorization: `Bearer ${key}` } } : {});
  if (res.status === 401) {
    const why = (await res.json().catch(() => ({}))).detail || "an API key is needed";
    const entered = window.prompt(`${why}\n\nYour API key:`);
    if (entered && entered.trim()) {
      sessionStorage.setItem(KEY, entered.trim());
      return api(path);
    }
  }
  if (!res.ok) throw new Error(`${path}: ${res.status}`);
  return res.json();
}

// ---- runs and live polling -----------------------------------------------------------------

function signature(run) {
  return [run.generation, run.metrics_rows, run.rollouts_bytes, run.trace_bytes, run.status].join("/");
}

async function poll() {
  let runs;
  try {
    runs = await api("api/runs");
    $("#live").className = "ok";
  } catch (e) {
    $("#live").className = "down";
    return;
  }
  const first = state.runs.length === 0;
  const changed = runs.filter((r, i) => !state.runs[i] || signature(state.runs[i]) !== signature(r)).map((r) => r.id);
  state.runs = runs;
  if (first) setupRuns();
  for (const r of runs) $(`#run-${r.id} .run-meta`).textContent = `${r.status}, step ${r.last_step ?? "-"}`;
  showWarnings(runs);
  if (!changed.length) return;
  const drawn = drawnRuns();
  await Promise.all(changed.filter((id) => drawn.has(id) || id === state.current).map(loadMetrics));
  drawCurves();
  if (changed.includes(state.current)) refreshTab(true);
}

// What the viewer could not read in a run dir (a corrupt file, a link out of it): skipped, and said here.
function showWarnings(runs) {
  const lines = runs.flatMap((r) => (r.warnings || []).map((w) => el("li", { text: `${r.name}: ${w}` })));
  const box = $("#warnings");
  box.hidden = lines.length === 0;
  box.replaceChildren(...(lines.length ? [el("strong", { text: "Not shown: " }), el("ul", {}, ...lines)] : []));
}

function setupRuns() {
  const box = $("#runs"), select = $("#current-run");
  state.runs.forEach((r, i) => {
    if (i < 4) state.shown.add(r.id);
    const box_ = el("input", { type: "checkbox", "aria-label": `show ${r.name}` });
    box_.checked = state.shown.has(r.id);
    box_.addEventListener("change", async () => {
      if (box_.checked) state.shown.add(r.id); else state.shown.delete(r.id);
      await Promise.all([...drawnRuns()].filter((id) => !state.metrics[id]).map(loadMetrics));
      drawCurves();
    });
    const label = el("label", { class: "run", id: `run-${r.id}`, style: `--c:${COLOURS[i % COLOURS.length]}; --depth:${Math.min(r.lineage?.depth || 0, 6)}` },
      box_, el("span", { class: "swatch" }), el("b", { text: r.name }), " ", el("span", { class: "run-meta muted" }));
    const parent = r.lineage?.parent;
    if (parent) {  // a fork: whose, from which step, with which overrides (all as text)
      const overrides = r.lineage.overrides.join(" ") + (r.lineage.more_overrides ? ` (+${r.lineage.more_overrides} more)` : "");
      label.append(" ", el("span", { class: "fork-of muted", title: overrides || "no overrides",
        text: `\u21b3 fork of ${parent.name} @ ${parent.step}${parent.served ? "" : " (not served)"}${overrides ? `: ${overrides}` : ""}` }));
    }
    box.append(label);
    select.append(el("option", { value: r.id, text: r.name }));
  });
  $("#tabs [data-tab=report]").hidden = !state.runs.some((r) => r.report);
  select.addEventListener("change", () => { state.current = Number(select.value); refreshTab(false); });
}

// ---- curves --------------------------------------------------------------------------------

// A shown fork brings its served parent's curve (dashed, in the fork's colour) and a mark at the
// step it was forked from, so where the two part is seen; the parent need not be ticked.
function forkParent(id) {
  const parent = state.runs[id]?.lineage?.parent;
  return parent && parent.served && parent.id !== null ? parent : null;
}

// The vertical marks of a shown run: the step it was forked from, and each live setting change
// (`opentinker job set`: a `live/<key.path>` column in metrics.jsonl at the step it took effect).
function runMarks(id) {
  const colour = COLOURS[id % COLOURS.length], name = state.runs[id]?.name;
  const parent = state.runs[id]?.lineage?.parent;
  const out = parent ? [{ id, step: parent.step, colour, kind: "fork-mark", label: `${name}: forked from ${parent.name} @ ${parent.step}` }] : [];
  const m = state.metrics[id];
  for (const [k, values] of Object.entries(m?.series || {})) {
    if (!k.startsWith("live/")) continue;
    values.forEach((v, i) => {
      if (v !== null) out.push({ id, step: m.steps[i], colour, kind: "live-mark", label: `${name}: ${k.slice(5)} = ${fmt(v)} from step ${m.steps[i]}` });
    });
  }
  return out;
}

function drawnRuns() {
  const ids = new Set(state.shown);
  for (const id of state.shown) { const p = forkParent(id); if (p) ids.add(p.id); }
  return ids;
}

async function loadMetrics(id) {
  let have = state.metrics[id];
  let data = await api(`api/runs/${id}/metrics?since=${have ? have.next : 0}`);
  if (have && data.generation !== have.generation) {  // the run dir was started over: read it again
    data = await api(`api/runs/${id}/metrics?since=0`);
    have = null;
  }
  if (!have) state.metrics[id] = { generation: data.generation, next: 0, steps: [], series: {} };
  const m = state.metrics[id];
  const before = m.steps.length;
  m.steps.push(...data.steps);
  for (const [k, values] of Object.entries(data.series)) {
    if (!m.series[k]) m.series[k] = new Array(before).fill(null);
    m.series[k].push(...values);
  }
  for (const k of Object.keys(m.series)) while (m.series[k].length < m.steps.length) m.series[k].push(null);
  m.next = data.next;
}

function metricKeys() {
  const keys = new Set();
  for (const id of state.shown) for (const k of Object.keys(state.metrics[id]?.series || {})) keys.add(k);
  return [...keys].sort();
}

function smoothed(steps, values, weight) {
  const xs = [], ys = [];
  let last = 0, n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) continue;
    last = last * weight + (1 - weight) * v;
    n++;
    xs.push(steps[i]);
    ys.push(weight > 0 ? last / (1 - Math.pow(weight, n)) : v);
  }
  return [xs, ys];
}

function series(metric, weight, maxPoints) {
  const out = [];
  const colour = (id) => COLOURS[state.runs.findIndex((r) => r.id === id) % COLOURS.length];
  const wanted = [...state.shown].sort((a, b) => a - b).map((id) => ({ id, colour: colour(id) }));
  for (const id of [...state.shown].sort((a, b) => a - b)) {
    const p = forkParent(id);
    if (p && !state.shown.has(p.id)) wanted.push({ id: p.id, colour: colour(id), parentOf: id });
  }
  for (const { id, colour: c, parentOf } of wanted) {
    const m = state.metrics[id];
    if (!m || !m.series[metric]) continue;
    let [xs, ys] = smoothed(m.steps, m.series[metric], weight);
    if (xs.length > maxPoints) {
      const stride = Math.ceil(xs.length / maxPoints);
      xs = xs.filter((_, i) => i % stride === 0 || i === xs.length - 1);
      ys = ys.filter((_, i) => i % stride === 0 || i === ys.length - 1);
    }
    if (xs.length) out.push({ id, xs, ys, colour: c, parentOf });
  }
  return out;
}

// The legend says the last value a run logged (not the smoothed one the curve ends on).
function lastValue(id) {
  const values = state.metrics[id]?.series[state.metric] || [];
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && Number.isFinite(values[i])) return values[i];
  return null;
}

function ticks(lo, hi, n) {
  if (hi === lo) return [lo];
  const step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
  const best = [1, 2, 5, 10].map((f) => f * step).find((s) => (hi - lo) / s <= n) || step * 10;
  const out = [];
  for (let t = Math.ceil(lo / best) * best; t <= hi + 1e-12; t += best) out.push(+t.toPrecision(12));
  return out;
}

function plot(svg, lines, { width, height, axes, marks = [] }) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const pad = axes ? { l: 64, r: 12, t: 10, b: 28 } : { l: 4, r: 4, t: 4, b: 4 };
  const all = lines.flatMap((s) => s.xs), ally = lines.flatMap((s) => s.ys);
  if (!all.length) return null;
  let [x0, x1, y0, y1] = [Math.min(...all), Math.max(...all), Math.min(...ally), Math.max(...ally)];
  if (x0 === x1) x1 = x0 + 1;
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => pad.l + (x - x0) / (x1 - x0) * (width - pad.l - pad.r);
  const sy = (y) => height - pad.b - (y - y0) / (y1 - y0) * (height - pad.t - pad.b);
  if (axes) {
    for (const t of ticks(y0, y1, 5)) {
      svg.append(svgEl("line", { x1: pad.l, x2: width - pad.r, y1: sy(t), y2: sy(t), class: "grid" }));
      const label = svgEl("text", { x: pad.l - 6, y: sy(t) + 4, "text-anchor": "end", class: "tick" });
      label.textContent = fmt(t);
      svg.append(label);
    }
    for (const t of ticks(x0, x1, 8)) {
      const label = svgEl("text", { x: sx(t), y: height - 8, "text-anchor": "middle", class: "tick" });
      label.textContent = t;
      svg.append(label);
    }
  }
  for (const m of marks) {  // a fork's step or a live change: a vertical line, when it lies on the x axis
    if (m.step < x0 || m.step > x1) continue;
    const line = svgEl("line", { x1: sx(m.step), x2: sx(m.step), y1: pad.t, y2: height - pad.b, class: m.kind, stroke: m.colour, "data-run": m.id, "data-step": m.step });
    const title = svgEl("title");
    title.textContent = m.label;  // the hover text (text, never markup)
    line.append(title);
    svg.append(line);
  }
  for (const s of lines) {
    const d = s.xs.map((x, i) => `${i ? "L" : "M"}${sx(x).toFixed(1)},${sy(s.ys[i]).toFixed(1)}`).join("");
    const attrs = { d, class: s.parentOf === undefined ? "series" : "series parent", stroke: s.colour, "data-run": s.id, "data-points": s.xs.length };
    if (s.parentOf !== undefined) attrs["data-parent-of"] = s.parentOf;
    svg.append(svgEl("path", attrs));
    if (s.xs.length === 1) svg.append(svgEl("circle", { cx: sx(s.xs[0]), cy: sy(s.ys[0]), r: 3, fill: s.colour }));
  }
  return { sx, sy, x0, x1, pad, width };
}

function drawCurves() {
  const keys = metricKeys();
  const select = $("#metric");
  if (select.options.length !== keys.length || [...select.options].some((o, i) => o.value !== keys[i])) {
    select.replaceChildren(...keys.map((k) => el("option", { value: k, text: k })));
  }
  if (!state.metric || !keys.includes(state.metric)) {
    state.metric = ["eval/accuracy", "env/reward_mean", "losses/total"].find((k) => keys.includes(k)) || keys[0] || null;
  }
  select.value = state.metric || "";
  if (state.tab !== "curves") return;
  const weight = Number($("#smooth").value);
  const box = $("#chart-box");
  const width = Math.max(320, box.clientWidth || 900);
  const lines = series(state.metric, weight, width * 2);
  const marks = [...state.shown].filter((id) => lines.some((s) => s.id === id)).flatMap((id) => runMarks(id));
  const scale = plot($("#chart"), lines, { width, height: 340, axes: true, marks });
  $("#chart").dataset.metric = state.metric || "";
  $("#chart-info").textContent = lines.length ? `${lines.reduce((a, s) => a + s.xs.length, 0)} points` : "no data for this metric yet";
  $("#legend").replaceChildren(...lines.map((s) => el("span", { class: s.parentOf === undefined ? "legend" : "legend parent", style: `--c:${s.colour}` },
    el("span", { class: "swatch" }), `${state.runs[s.id].name}${s.parentOf === undefined ? "" : ` (parent of ${state.runs[s.parentOf].name}, dashed)`}: ${fmt(lastValue(s.id))} at step ${s.xs[s.xs.length - 1]}`)));
  state.scale = scale && { ...scale, lines };
  const grid = $("#grid");
  grid.replaceChildren(...keys.map((k) => {
    const svg = svgEl("svg", { class: "mini" });
    plot(svg, series(k, weight, 200), { width: 220, height: 70, axes: false });
    const card = el("button", { class: "mini-card" + (k === state.metric ? " active" : ""), "data-metric": k, title: k },
      el("span", { text: k }), svg);
    card.addEventListener("click", () => { state.metric = k; drawCurves(); window.scrollTo(0, 0); });
    return card;
  }));
}

function hover(event) {
  const s = state.scale, tip = $("#tip");
  if (!s) return;
  const rect = $("#chart").getBoundingClientRect();
  const x = s.x0 + (event.clientX - rect.left - s.pad.l) / (rect.width - s.pad.l - s.pad.r) * (s.x1 - s.x0);
  const rows = s.lines.map((line) => {
    let best = 0;
    for (let i = 0; i < line.xs.length; i++) if (Math.abs(line.xs[i] - x) < Math.abs(line.xs[best] - x)) best = i;
    const name = el("span", { text: state.runs[line.id].name });
    name.style.color = line.colour;
    return el("div", {}, name, ` step ${line.xs[best]}: ${fmt(line.ys[best])}`);
  });
  tip.replaceChildren(...rows);
  tip.hidden = false;
  tip.style.left = `${event.clientX - rect.left + 12}px`;
  tip.style.top = `${event.clientY - rect.top + 12}px`;
}

// ---- rollout browser (train and eval) -----------------------------------------------------

class Browser {
  constructor(root) {
    this.root = root;
    this.kind = root.dataset.kind;
    root.append($("#browser-template").content.cloneNode(true));
    this.steps = [];
    this.offset = 0;
    this.limit = 20;
    this.runId = null;
    const q = (c) => $(`.${c}`, root);
    this.slider = q("step-slider");
    this.slider.addEventListener("input", () => { q("step-label").textContent = this.step() ?? "-"; this.reload(); });
    q("prev").addEventListener("click", () => this.move(-1));
    q("next").addEventListener("click", () => this.move(1));
    for (const c of ["all-steps", "min-reward", "max-reward", "stop-reason", "min-tokens", "max-tokens", "search", "colour"]) {
      q(c).addEventListener(c === "search" || c.includes("-re") || c.includes("tokens") ? "input" : "change", () => this.reload());
    }
    q("page-prev").addEventListener("click", () => { this.offset = Math.max(0, this.offset - this.limit); this.load(); });
    q("page-next").addEventListener("click", () => { this.offset += this.limit; this.load(); });
  }

  step() { return this.steps.length ? this.steps[Number(this.slider.value)] : null; }
  move(d) {
    this.slider.value = Math.min(this.steps.length - 1, Math.max(0, Number(this.slider.value) + d));
    this.slider.dispatchEvent(new Event("input"));
  }
  reload() { this.offset = 0; clearTimeout(this.timer); this.timer = setTimeout(() => this.load(), 120); }

  async refresh(live) {
    const sameRun = this.runId === state.current;
    const index = await api(`api/runs/${state.current}/rollouts/index`);
    const steps = index.steps[this.kind] || [];
    const atEnd = !sameRun || Number(this.slider.value) >= this.steps.length - 1;
    const current = sameRun ? this.step() : null;
    this.steps = steps;
    this.runId = state.current;
    this.slider.max = Math.max(0, steps.length - 1);
    this.slider.value = atEnd || current === null ? steps.length - 1 : Math.max(0, steps.indexOf(current));
    $(".step-label", this.root).textContent = this.step() ?? "-";
    const stop = $(".stop-reason", this.root), chosen = stop.value;
    stop.replaceChildren(el("option", { value: "", text: "any" }), ...index.stop_reasons.map((s) => el("option", { value: s, text: s })));
    stop.value = index.stop_reasons.includes(chosen) ? chosen : "";
    if (!live || atEnd) await this.load();
  }

  query(extra = {}) {
    const p = new URLSearchParams({ kind: this.kind, offset: this.offset, limit: this.limit });
    const v = (c) => $(`.${c}`, this.root).value.trim();
    if (!$(".all-steps", this.root).checked && this.step() !== null) p.set("step", this.step());
    for (const [c, k] of [["min-reward", "min_reward"], ["max-reward", "max_reward"], ["min-tokens", "min_tokens"],
      ["max-tokens", "max_tokens"], ["stop-reason", "stop_reason"], ["search", "q"]]) if (v(c) !== "") p.set(k, v(c));
    for (const [k, val] of Object.entries(extra)) p.set(k, val);
    return p;
  }

  async load() {
    const status = $(".status", this.root);
    if (!this.steps.length) {
      status.textContent = `no ${this.kind} rollouts recorded in this run (rollouts.jsonl)`;
      $(".episodes", this.root).replaceChildren();
      return;
    }
    const data = await api(`api/runs/${state.current}/rollouts?${this.query()}`);
    const step = $(".all-steps", this.root).checked ? "all steps" : `step ${this.step()}`;
    status.textContent = `${data.total} episode${data.total === 1 ? "" : "s"} at ${step}` + (data.search_complete ? "" : " (search stopped early: narrow the filters)");
    this.root.dataset.total = data.total;
    $(".episodes", this.root).replaceChildren(...data.items.map((r) => this.card(r, true)));
    $(".page-info", this.root).textContent = data.total ? `${data.offset + 1}-${data.offset + data.items.length} of ${data.total}` : "";
    $(".page-prev", this.root).disabled = data.offset === 0;
    $(".page-next", this.root).disabled = data.offset + data.items.length >= data.total;
  }

  async openGroup(step, group) {
    const p = new URLSearchParams({ kind: this.kind, step, group, limit: 200 });
    const data = await api(`api/runs/${state.current}/rollouts?${p}`);
    const view = $(".group-view", this.root);
    const close = el("button", { class: "close-group", text: "close group" });
    close.addEventListener("click", () => { view.hidden = true; view.replaceChildren(); });
    const rewards = data.items.map((r) => r.reward);
    const mean = rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length);
    view.replaceChildren(el("div", { class: "group-head" }, el("b", { text: `step ${step}, group ${group}` }),
      ` ${data.total} episodes, mean reward ${fmt(mean)} `, close),
    el("div", { class: "group-columns" }, ...data.items.map((r) => this.card(r, false))));
    view.dataset.group = group;
    view.hidden = false;
    view.scrollIntoView({ block: "nearest" });
  }

  card(r, withGroupLink) {
    const reward = el("span", { class: "reward " + (r.reward > 0 ? "pos" : r.reward < 0 ? "neg" : "zero"), text: `reward ${fmt(r.reward)}` });
    const head = el("div", { class: "card-head" }, reward,
      el("span", { text: `adv ${fmt(r.advantage)}` }), el("span", { class: "stop", text: r.stop_reason }),
      el("span", { text: `${r.new_tokens} tokens` }), el("span", { class: "muted", text: `step ${r.step} · ep ${r.episode}` }));
    if (r.agent) head.append(el("span", { class: "agent", text: `seat ${r.agent}` }));
    if (r.outcome) head.append(el("span", { class: `outcome ${r.outcome === "win" ? "pos" : r.outcome === "draw" ? "" : "neg"}`, text: r.outcome }));
    else if (r.success === true || r.success === false) head.append(el("span", { class: `outcome ${r.success ? "pos" : "neg"}`, text: r.success ? "success" : "no success" }));
    if (r.truncated) head.append(el("span", { class: "outcome truncated", text: "truncated" }));
    if (r.error) head.append(el("span", { class: "outcome error", text: `error: ${r.error}` }));
    if (withGroupLink) {
      const link = el("button", { class: "group-link", text: `group ${r.group}` });
      link.addEventListener("click", () => this.openGroup(r.step, r.group));
      head.prepend(link);
    } else head.prepend(el("span", { class: "muted", text: `group ${r.group}` }));
    const body = el("div", { class: "turns" }, el("div", { class: "turn prompt" }, el("span", { class: "role", text: "prompt" }),
      el("pre", { text: r.prompt ?? (r.messages || []).map((m) => `${m.role}: ${m.content}`).join("\n") })));
    for (const t of r.turns || []) body.append(this.turn(t, r.advantage));
    return el("article", { class: "episode", "data-reward": r.reward, "data-group": r.group, "data-index": r.index }, head, body);
  }

  turn(t, advantage) {
    const mode = $(".colour", this.root).value;
    const node = el("div", { class: `turn ${t.role === "policy" ? "policy" : "env"}` }, el("span", { class: "role", text: `${t.role} · ${t.tokens ?? "?"} tok` }));
    if (t.role === "policy" && Array.isArray(t.token_texts) && mode !== "none") {
      const pre = el("pre", { class: "tokens" });
      t.token_texts.forEach((text, i) => {
        const lp = t.logprobs ? t.logprobs[i] : null;
        const tok = el("span", { class: "tok", text, title: `${JSON.stringify(text)} logprob ${fmt(lp)} p ${lp === null ? "-" : fmt(Math.exp(lp))} advantage ${fmt(advantage)}` });
        tok.style.background = mode === "logprob" ? probColour(lp) : advColour(advantage);
        if (lp !== null) tok.dataset.logprob = lp;
        pre.append(tok);
      });
      node.append(pre);
    } else node.append(el("pre", { text: t.text ?? "" }));
    if (t.tool_calls && t.tool_calls.length) node.append(el("pre", { class: "tools", text: "tool calls: " + JSON.stringify(t.tool_calls, null, 1) }));
    return node;
  }
}

function probColour(lp) {
  if (lp === null || lp === undefined) return "transparent";
  const p = Math.exp(Math.min(0, lp));
  return `hsl(${Math.round(120 * p)}, 75%, ${Math.round(88 - 8 * (1 - p))}%)`;
}
function advColour(a) {
  if (a === null || a === undefined || a === 0) return "transparent";
  const alpha = Math.min(1, Math.abs(a)) * 0.6 + 0.1;
  return a > 0 ? `rgba(44,160,44,${alpha})` : `rgba(214,39,40,${alpha})`;
}

// ---- config, checkpoints, phases, report --------------------------------------------------

function table(head, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => c instanceof Node ? el("td", {}, c) : el("td", { text: c }))))));
}

async function showConfig() {
  const data = await api(`api/runs/${state.current}/config`);
  const res = data.result || {};
  $("#result").replaceChildren(el("p", { text: `status: ${res.status ?? "running (no result.json yet)"}` + (res.step ? `, step ${res.step}` : "") }));
  $("#config-json").textContent = data.config ? JSON.stringify(data.config, null, 2) : "no config.json in this run dir";
}

async function showCheckpoints() {
  const rows = await api(`api/runs/${state.current}/checkpoints`);
  const mb = (b) => (b / 1e6).toFixed(1) + " MB";
  $("#checkpoint-table").replaceWith(Object.assign(rows.length
    ? table(["checkpoint", "step", "files", "size", "written"], rows.map((c) => [c.name, c.step ?? "-", c.files, mb(c.bytes), new Date(c.mtime * 1000).toLocaleString()]))
    : el("p", { text: "no checkpoints yet" }), { id: "checkpoint-table" }));
}

async function showTrace() {
  const data = await api(`api/runs/${state.current}/trace`);
  const body = $("#trace-body");
  if (!data.present || !data.phases.length) {
    body.replaceChildren(el("p", { text: "no trace.json in this run dir yet (written by runs that record their phases)" }));
    return;
  }
  const bar = (share) => el("span", { class: "bar" }, el("span", { style: `width:${((share ?? 0) * 100).toFixed(1)}%` }));
  const gib = (v) => (v === null || v === undefined ? "-" : v.toFixed(2));
  const pct = (share) => (share === null || share === undefined ? "-" : `${(100 * share).toFixed(1)}%`);
  body.replaceChildren(el("p", { text: `${data.events} events over ${data.steps} steps; share of the step time (${fmt(data.step_total_ms / Math.max(1, data.steps))} ms per step)` }),
    table(["phase", "count", "mean ms", "p50 ms", "p95 ms", "share", "", "peak RSS GiB", "peak CUDA GiB"], data.phases.map((p) =>
      [p.name, p.count, fmt(p.mean_ms), fmt(p.p50_ms), fmt(p.p95_ms), pct(p.share), bar(p.share), gib(p.peak_rss_gib), gib(p.peak_cuda_gib)])));
}

async function showReport() {
  const run = state.runs.find((r) => r.report);
  if (!run) return;
  const data = await api(`api/runs/${run.id}/report`);
  $("#report-body").replaceChildren(el("h2", { text: run.name }), el("pre", { class: "markdown", text: data.markdown ?? JSON.stringify(data.report, null, 1) }));
}

async function refreshTab(live) {
  try {
    if (state.tab === "curves") drawCurves();
    else if (state.tab === "rollouts" || state.tab === "eval") await state.browsers[state.tab].refresh(live);
    else if (state.tab === "config") await showConfig();
    else if (state.tab === "checkpoints") await showCheckpoints();
    else if (state.tab === "trace") await showTrace();
    else if (state.tab === "report") await showReport();
  } catch (e) {
    console.error(e);
  }
}

function selectTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll("main > section")) s.classList.toggle("active", s.id === tab);
  history.replaceState(null, "", `#${tab}`);
  refreshTab(false);
}

async function main() {
  for (const root of document.querySelectorAll(".browser")) state.browsers[root.id] = new Browser(root);
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => selectTab(b.dataset.tab));
  $("#metric").addEventListener("change", (e) => { state.metric = e.target.value; drawCurves(); });
  $("#smooth").addEventListener("input", (e) => { $("#smooth-value").textContent = Number(e.target.value).toFixed(2); drawCurves(); });
  $("#chart").addEventListener("mousemove", hover);
  $("#chart").addEventListener("mouseleave", () => { $("#tip").hidden = true; });
  window.addEventListener("resize", () => drawCurves());
  await poll();
  const tab = location.hash.slice(1);
  selectTab(document.getElementById(tab)?.classList.contains("tab") ? tab : "curves");
  document.body.dataset.ready = "1";
  setInterval(poll, POLL_MS);
}

main();
