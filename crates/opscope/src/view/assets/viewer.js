// opscope's timeline viewer. The page holds only what the screen shows: each change of
// the view asks the server for the visible tracks at the canvas' width, and the
// server answers from its level-of-detail summaries. Times are ns after the trace's
// start (the server's origin).
'use strict';

const AXIS = 26, LABEL = 230, ROW = 15, GROUP = 20, COUNTER = 40, GAP = 5, FOLDED_ROWS = 10, MAX_ROWS = 48;
const COLOURS = {
  op: '#4e79a7', kernel: '#59a14f', memcpy_h2d: '#edc948', memcpy_d2h: '#f28e2b',
  memcpy_d2d: '#b07aa1', memcpy_p2p: '#ff9da7', memcpy_h2h: '#e8c36a', memcpy: '#f1ce63',
  memset: '#9c755f', runtime: '#bab0ac', driver: '#8c8c8c', sync: '#e15759',
  collective: '#d37295', annotation: '#76b7b2', step: '#86bcb6',
  python_function: '#a0cbe8', alloc: '#ffbe7d', other: '#c7c7c7',
};

// Everything the page knows; `window.opscopeViewer` lets tests and the console read it.
const state = {
  meta: null, kinds: [], layout: [], byId: new Map(), height: 0,
  start: 0, end: 1, scrollY: 0, mouseX: LABEL, expanded: new Set(),
  data: null, names: new Map(), inFlight: false, again: false,
  requests: 0, answered: 0, lastServerMs: 0, lastItems: 0, drawn: [],
  selected: null, details: null, selection: null, drag: null,
  panelsLoaded: false, critical: null, criticalEdges: [], generation: 0, errors: [], steps: null, moved: false,
};
window.opscopeViewer = state;

const canvas = document.getElementById('canvas');
const ctx = canvas.getContext('2d');
const $ = (id) => document.getElementById(id);

async function getJSON(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(path + ': ' + (await r.text()));
  return r.json();
}
async function getText(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(path + ': ' + (await r.text()));
  return r.text();
}

function fmtDur(ns) {
  const a = Math.abs(ns);
  if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e10 ? 1 : 3) + ' s';
  if (a >= 1e6) return (ns / 1e6).toFixed(a >= 1e7 ? 1 : 3) + ' ms';
  if (a >= 1e3) return (ns / 1e3).toFixed(a >= 1e4 ? 1 : 3) + ' µs';
  return Math.round(ns) + ' ns';
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
}

// ---- layout: groups (a rank or file and its process), then its tracks ----

function trackHeight(t) {
  if (t.kind === 'counter') return COUNTER;
  const rows = state.expanded.has(t.id) ? t.rows : Math.min(t.rows || 1, FOLDED_ROWS);
  return rows * ROW + GAP;
}

function layout() {
  state.layout = [];
  state.byId = new Map();
  let y = 0, group = null;
  for (const t of state.meta.tracks) {
    if (t.group !== group) {
      group = t.group;
      state.layout.push({ header: group, y, h: GROUP });
      y += GROUP;
    }
    const h = trackHeight(t);
    const entry = { track: t, y, h };
    state.layout.push(entry);
    state.byId.set(t.id, entry);
    y += h;
  }
  state.height = y;
}

function viewHeight() { return canvas.clientHeight - tracksTop(); }
function timeWidth() { return Math.max(1, canvas.clientWidth - LABEL); }
function xOf(t) { return LABEL + (t - state.start) / (state.end - state.start) * timeWidth(); }
function tOf(x) { return state.start + (x - LABEL) / timeWidth() * (state.end - state.start); }
// Where the tracks begin: under the axis and, once found, the steps band (tests read
// it as `opscopeViewer.top`).
function tracksTop() { return (state.top = AXIS + (state.steps ? STEPS : 0)); }
function yOf(entry) { return tracksTop() + entry.y - state.scrollY; }

function visibleTracks() {
  const top = state.scrollY, bottom = state.scrollY + viewHeight();
  return state.layout.filter((e) => e.track && e.y + e.h > top && e.y < bottom).map((e) => e.track.id);
}

// ---- asking the server ----

function request() {
  if (!state.meta) return;
  if (state.inFlight) { state.again = true; return; }
  state.inFlight = true;
  // An opened track asks for all its rows, the others for the rows they show.
  const tracks = visibleTracks().map((id) => state.expanded.has(id) ? `${id}:${MAX_ROWS}` : id);
  const q = `api/view?start=${Math.floor(state.start)}&end=${Math.ceil(state.end)}` +
    `&px=${timeWidth()}&rows=${FOLDED_ROWS}&tracks=${tracks.join(',')}`;
  state.requests++;
  getJSON(q).then((data) => {
    for (const [id, name] of Object.entries(data.names)) state.names.set(+id, name);
    state.data = data;
    state.answered++;
    state.lastServerMs = data.server_ms;
    state.lastItems = data.tracks.reduce((n, t) =>
      n + (t.rows ? t.rows.reduce((m, r) => m + r.length, 0) : (t.samples || []).length), 0);
    draw();
  }).catch((e) => { state.errors.push(String(e)); status(String(e)); }).finally(() => {
    state.inFlight = false;
    if (state.again) { state.again = false; request(); }
  });
}

let pendingTimer = null;
function changed() {
  draw();
  clearTimeout(pendingTimer);
  pendingTimer = setTimeout(request, 15);
}

// ---- drawing ----

const colours = new Map();
function colour(kind, name, block) {
  const key = kind + (block ? '#' : ':') + name;
  let c = colours.get(key);
  if (c === undefined) {
    if (colours.size > 20000) colours.clear();
    c = shade(kind, name, block);
    colours.set(key, c);
  }
  return c;
}

// Kinds whose slices are told apart by name (a recorded session's ops are all `op`):
// each name its own hue. The others keep their kind's colour, shaded by name.
const BY_NAME = new Set(['op', 'kernel', 'annotation', 'python_function', 'collective', 'compile']);

function shade(kind, name, block) {
  if (BY_NAME.has(kind)) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
    const hue = (h >>> 0) % 360, light = 48 + ((h >>> 9) % 3) * 6;
    return `hsla(${hue},55%,${light}%,${block ? 0.55 : 1})`;
  }
  const base = COLOURS[kind] || COLOURS.other;
  // Names vary the shade, so neighbours of one kind can be told apart.
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
  const shade = ((h >>> 0) % 5) * 0.06 - 0.12;
  let r = parseInt(base.slice(1, 3), 16), g = parseInt(base.slice(3, 5), 16), b = parseInt(base.slice(5, 7), 16);
  const f = (v) => Math.max(0, Math.min(255, Math.round(v + shade * 255)));
  if (block) return `rgba(${f(r)},${f(g)},${f(b)},0.55)`;
  return `rgb(${f(r)},${f(g)},${f(b)})`;
}

function resize() {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(canvas.clientWidth * dpr);
  canvas.height = Math.round(canvas.clientHeight * dpr);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
}

function niceStep(ns) {
  const p = Math.pow(10, Math.floor(Math.log10(ns)));
  for (const m of [1, 2, 5, 10]) if (p * m >= ns) return p * m;
  return p * 10;
}

function draw() {
  if (!state.meta) return;
  const W = canvas.clientWidth, H = canvas.clientHeight;
  ctx.clearRect(0, 0, W, H);
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  state.drawn = [];
  // Track labels and group bars.
  ctx.save();
  ctx.beginPath(); ctx.rect(0, tracksTop(), W, H - tracksTop()); ctx.clip();
  for (const e of state.layout) {
    const y = yOf(e);
    if (y + e.h < tracksTop() || y > H) continue;
    if (e.header !== undefined) {
      ctx.fillStyle = '#e9eef5'; ctx.fillRect(0, y, W, e.h);
      ctx.fillStyle = '#123'; ctx.fillText(e.header, 6, y + e.h / 2);
      continue;
    }
    ctx.fillStyle = '#fafafa'; ctx.fillRect(0, y, LABEL, e.h);
    ctx.strokeStyle = '#eee'; ctx.beginPath(); ctx.moveTo(0, y + e.h - 0.5); ctx.lineTo(W, y + e.h - 0.5); ctx.stroke();
    ctx.fillStyle = '#333';
    const t = e.track;
    const more = t.rows > FOLDED_ROWS ? (state.expanded.has(t.id) ? ' ▾' : ' ▸') : '';
    ctx.fillText(clip(t.name + more, LABEL - 12), 12, y + Math.min(e.h, ROW) / 2 + 1);
  }
  ctx.restore();
  // Items.
  ctx.save();
  ctx.beginPath(); ctx.rect(LABEL, tracksTop(), W - LABEL, H - tracksTop()); ctx.clip();
  if (state.data) {
    for (const t of state.data.tracks) {
      const e = state.byId.get(t.id);
      if (!e) continue;
      const y0 = yOf(e);
      if (y0 + e.h < tracksTop() || y0 > H) continue;
      let items = 0;
      if (t.rows) items = drawRows(t, e, y0, W);
      else if (t.samples) items = drawCounter(t, e, y0);
      state.drawn.push({ id: t.id, items });
    }
    drawFlows(W, H);
    if (state.critical) drawCriticalEdges(W, H);
  }
  if (state.selection) {
    const [a, b] = state.selection;
    ctx.fillStyle = 'rgba(30,90,200,0.12)';
    ctx.fillRect(xOf(a), AXIS, xOf(b) - xOf(a), H - AXIS);
  }
  ctx.restore();
  drawAxis(W);
  if (state.steps) drawSteps(W);
}

function clip(text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(text.slice(0, mid) + '…').width <= width) lo = mid; else hi = mid - 1;
  }
  return lo > 0 ? text.slice(0, lo) + '…' : '';
}

function drawRows(t, e, y0, W) {
  const shown = state.expanded.has(t.id) ? t.rows.length : Math.min(t.rows.length, FOLDED_ROWS);
  let n = 0;
  for (let r = 0; r < shown; r++) {
    const y = y0 + r * ROW;
    // One rectangle per pixel at most: an item inside the pixel already drawn adds
    // nothing to see, only work for the browser.
    let drawnTo = -Infinity;
    for (const it of t.rows[r]) {
      const [s, en, slice, count, kind, name] = it;
      let x0 = xOf(s), x1 = xOf(en);
      if (x1 < LABEL || x0 > W) continue;
      x0 = Math.max(x0, LABEL - 1); x1 = Math.min(x1, W + 1);
      if (x1 <= drawnTo) { n++; continue; }
      const w = Math.max(x1 - x0, 1);
      drawnTo = x0 + w;
      const label = state.names.get(name) || '';
      ctx.fillStyle = colour(state.kinds[kind] || 'other', label, count > 1);
      ctx.fillRect(x0, y + 1, w, ROW - 2);
      if (state.critical && count === 1 && state.critical.has(slice)) {
        ctx.strokeStyle = '#d00'; ctx.lineWidth = 2;
        ctx.strokeRect(x0, y + 1, w, ROW - 2); ctx.lineWidth = 1;
      }
      if (state.selected && state.selected.id === slice && count === 1) {
        ctx.strokeStyle = '#000'; ctx.lineWidth = 2;
        ctx.strokeRect(x0, y + 1, w, ROW - 2); ctx.lineWidth = 1;
      }
      if (w > 36) {
        ctx.fillStyle = count > 1 ? '#333' : '#fff';
        const text = count > 1 ? `${count} × ${label}` : label;
        ctx.fillText(clip(text, w - 6), x0 + 3, y + ROW / 2);
      }
      n++;
    }
  }
  return n;
}

function drawCounter(t, e, y0) {
  const info = e.track;
  const lo = Math.min(0, info.min || 0), hi = Math.max(info.max || 1, lo + 1e-9);
  const h = e.h - GAP;
  const yv = (v) => y0 + h - (v - lo) / (hi - lo) * (h - 2);
  const samples = t.samples;
  ctx.fillStyle = 'rgba(78,121,167,0.45)';
  ctx.strokeStyle = '#4e79a7';
  for (let i = 0; i < samples.length; i++) {
    const [s, , , max, last] = samples[i];
    // The last value holds to the trace's end, not past it.
    const next = i + 1 < samples.length ? samples[i + 1][0] : Math.min(state.end, state.meta.span);
    const x0 = Math.max(xOf(s), LABEL), x1 = Math.max(xOf(next), x0 + 1);
    ctx.fillRect(x0, yv(max), x1 - x0, y0 + h - yv(max));
    ctx.fillRect(x0, yv(last), x1 - x0, 1);
  }
  ctx.fillStyle = '#555';
  ctx.fillText(fmtValue(info.max), LABEL + 4, y0 + 7);
  return samples.length;
}

function fmtValue(v) {
  if (v === undefined) return '';
  const a = Math.abs(v);
  if (a >= 1 << 30) return (v / (1 << 30)).toFixed(2) + ' Gi';
  if (a >= 1 << 20) return (v / (1 << 20)).toFixed(1) + ' Mi';
  if (a >= 1e4) return (v / 1e3).toFixed(1) + ' k';
  return String(Math.round(v * 100) / 100);
}

// Arrows drawn at most: many hide the slices; past this an even sample of them is
// drawn (and the selected slice's, always).
const MAX_ARROWS = 150;

function drawFlows(W, H) {
  ctx.strokeStyle = 'rgba(40,40,40,0.55)';
  ctx.fillStyle = 'rgba(40,40,40,0.55)';
  const sel = state.selected ? state.selected.id : -1;
  const flows = state.data.flows;
  const every = Math.max(1, Math.ceil(flows.length / MAX_ARROWS));
  for (let k = 0; k < flows.length; k++) {
    const [from, fromTrack, fromRow, fromTs, to, toTrack, toRow, toTs] = flows[k];
    if (k % every !== 0 && from !== sel && to !== sel) continue;
    const a = state.byId.get(fromTrack), b = state.byId.get(toTrack);
    if (!a || !b) continue;
    const x0 = xOf(fromTs), x1 = xOf(toTs);
    const y0 = yOf(a) + fromRow * ROW + ROW / 2, y1 = yOf(b) + toRow * ROW + ROW / 2;
    if (Math.max(x0, x1) < LABEL || Math.min(x0, x1) > W) continue;
    if (Math.max(y0, y1) < tracksTop() || Math.min(y0, y1) > H) continue;
    ctx.beginPath(); ctx.moveTo(x0, y0);
    ctx.bezierCurveTo(x0 + 20, y0, x1 - 20, y1, x1, y1); ctx.stroke();
    ctx.beginPath(); ctx.moveTo(x1, y1); ctx.lineTo(x1 - 6, y1 - 3); ctx.lineTo(x1 - 6, y1 + 3); ctx.fill();
  }
}

// The critical path's steps from one slice to the next (a launch to its kernel, a
// kernel to the sync that waited for it, one op to the next) as red lines.
function drawCriticalEdges(W, H) {
  ctx.strokeStyle = '#d00'; ctx.lineWidth = 2;
  // A row a folded track hides: the line goes to the track's last row shown.
  const rowY = (e, row) => {
    const shown = state.expanded.has(e.track.id) ? MAX_ROWS : FOLDED_ROWS;
    return yOf(e) + Math.min(row, shown - 1) * ROW + ROW / 2;
  };
  for (const [fromTrack, fromRow, fromTs, toTrack, toRow, toTs] of state.criticalEdges) {
    const a = state.byId.get(fromTrack), b = state.byId.get(toTrack);
    if (!a || !b) continue;
    const x0 = xOf(fromTs), x1 = xOf(toTs);
    const y0 = rowY(a, fromRow), y1 = rowY(b, toRow);
    if (Math.max(x0, x1) < LABEL || Math.min(x0, x1) > W) continue;
    if (Math.max(y0, y1) < tracksTop() || Math.min(y0, y1) > H) continue;
    ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke();
  }
  ctx.lineWidth = 1;
}

// The steps (of the first process that has any) as a band under the axis: where each
// begins and ends, named; the first picture shows them.
const STEPS = 16;

function drawSteps(W) {
  const steps = state.steps;
  ctx.fillStyle = '#fbfbf5'; ctx.fillRect(0, AXIS, W, STEPS);
  ctx.fillStyle = '#333';
  ctx.fillText(steps.length ? clip('steps · ' + steps[0].process, LABEL - 12) : 'no steps found', 6, AXIS + STEPS / 2);
  ctx.save();
  ctx.beginPath(); ctx.rect(LABEL, AXIS, W - LABEL, STEPS); ctx.clip();
  steps.forEach((st, k) => {
    const x0 = Math.max(xOf(st.start), LABEL - 1), x1 = Math.min(xOf(st.end), W + 1);
    if (x1 < LABEL || x0 > W) return;
    ctx.fillStyle = k % 2 ? '#86bcb6' : '#a7d3cd';
    ctx.fillRect(x0, AXIS + 1, Math.max(x1 - x0, 1), STEPS - 2);
    if (x1 - x0 > 30) { ctx.fillStyle = '#123'; ctx.fillText(clip(st.name, x1 - x0 - 6), x0 + 3, AXIS + STEPS / 2); }
  });
  ctx.restore();
}

function drawAxis(W) {
  ctx.fillStyle = '#f3f3f3'; ctx.fillRect(0, 0, W, AXIS);
  ctx.strokeStyle = '#bbb'; ctx.beginPath(); ctx.moveTo(0, AXIS - 0.5); ctx.lineTo(W, AXIS - 0.5); ctx.stroke();
  const span = state.end - state.start;
  const step = niceStep(span / Math.max(2, timeWidth() / 110));
  ctx.fillStyle = '#333';
  for (let t = Math.ceil(state.start / step) * step; t <= state.end; t += step) {
    const x = xOf(t);
    ctx.fillRect(x, AXIS - 6, 1, 6);
    ctx.fillText(fmtDur(t), x + 3, AXIS / 2);
  }
  ctx.fillStyle = '#555';
  ctx.fillText(`${fmtDur(span)} shown`, 8, AXIS / 2);
}

// A message (the critical path's summary, an error) stays until another replaces it or
// what it told of is undone; the periodic refresh shows the drawing's figures only
// when there is none (it wiped the critical path's summary within half a second).
function status(text) {
  if (text !== undefined) state.message = text;
  $('status').textContent = state.message || (
    `${state.meta.tracks.length} tracks · ${state.lastItems} items drawn · server ${state.lastServerMs.toFixed(1)} ms`);
}

// ---- moving around ----

function setView(start, end, byUser = true) {
  if (byUser) state.moved = true;
  const span = state.meta.span;
  let width = Math.max(end - start, 50);
  width = Math.min(width, span * 1.1);
  start = Math.max(-span * 0.05, Math.min(start, span * 1.05 - width));
  state.start = start; state.end = start + width;
  changed();
}
function zoom(factor, atX) {
  const t = tOf(atX);
  setView(t - (t - state.start) * factor, t + (state.end - t) * factor);
}
function pan(fraction) {
  const d = (state.end - state.start) * fraction;
  setView(state.start + d, state.end + d);
}
function scrollTo(y) {
  state.scrollY = Math.max(0, Math.min(y, Math.max(0, state.height - viewHeight() + 20)));
  changed();
}
function fit(byUser = true) { setView(-state.meta.span * 0.01, state.meta.span * 1.01, byUser); }

// The steps, once the server has found them: a band under the axis, and the first
// picture narrowed to them (a recorded session's set-up and exit can dwarf them),
// unless the user has moved the view meanwhile.
async function loadSteps() {
  const found = await getJSON('api/steps');
  const first = found.steps.length ? found.steps[0].process : null;
  state.steps = found.steps.filter((st) => st.process === first);
  layout();
  if (!state.moved && found.spans.length) {
    const [a, b] = found.spans[0], pad = (b - a) * 0.02;
    setView(a - pad, b + pad, false);
  } else changed();
}

canvas.addEventListener('wheel', (ev) => {
  ev.preventDefault();
  if (ev.ctrlKey || ev.metaKey) zoom(Math.exp(ev.deltaY * 0.002), ev.offsetX);
  else if (ev.shiftKey) pan(ev.deltaY * 0.001);
  else if (Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) pan(ev.deltaX * 0.001);
  else scrollTo(state.scrollY + ev.deltaY);
}, { passive: false });

canvas.addEventListener('mousemove', (ev) => {
  state.mouseX = ev.offsetX;
  const d = state.drag;
  if (!d) return;
  if (Math.abs(ev.offsetX - d.x) + Math.abs(ev.offsetY - d.y) > 3) d.moved = true;
  if (d.select) {
    const a = tOf(Math.max(LABEL, Math.min(d.x, ev.offsetX))), b = tOf(Math.max(d.x, ev.offsetX));
    state.selection = [a, b];
    draw();
  } else if (d.moved) {
    const dt = (d.x - ev.offsetX) / timeWidth() * (d.end - d.start);
    state.start = d.start + dt; state.end = d.end + dt; state.moved = true;
    state.scrollY = Math.max(0, d.scrollY + d.y - ev.offsetY);
    changed();
  }
});
canvas.addEventListener('mousedown', (ev) => {
  canvas.focus();
  state.drag = { x: ev.offsetX, y: ev.offsetY, start: state.start, end: state.end, scrollY: state.scrollY,
    select: ev.offsetX > LABEL && (ev.offsetY < AXIS || ev.shiftKey), moved: false };
});
window.addEventListener('mouseup', (ev) => {
  const d = state.drag;
  state.drag = null;
  if (!d) return;
  if (d.select && d.moved && state.selection) { showSelection(); return; }
  if (!d.moved && ev.target === canvas) click(ev.offsetX, ev.offsetY);
});

window.addEventListener('keydown', (ev) => {
  if (ev.target === $('search')) return;
  const k = ev.key.toLowerCase();
  if (k === 'w') zoom(0.8, state.mouseX);
  else if (k === 's') zoom(1.25, state.mouseX);
  else if (k === 'a') pan(-0.15);
  else if (k === 'd') pan(0.15);
  else if (k === '0') fit();
  else if (k === 'c') toggleCritical();
  else if (k === 'f' && state.details) focusSlice(state.details);
  else if (k === 'escape') { state.selection = null; draw(); }
  else return;
  ev.preventDefault();
});

// What is under (x, y): the track, the row, and the item drawn there.
function hit(x, y) {
  const yy = y - tracksTop() + state.scrollY;
  const e = state.layout.find((l) => l.track && yy >= l.y && yy < l.y + l.h);
  if (!e) return null;
  const row = Math.floor((yy - e.y) / ROW);
  const t = state.data && state.data.tracks.find((d) => d.id === e.track.id);
  if (!t || !t.rows || !t.rows[row]) return { entry: e, row };
  const at = tOf(x), slack = (state.end - state.start) / timeWidth() * 2;
  let best = null;
  for (const it of t.rows[row]) {
    if (it[0] - slack <= at && at <= it[1] + slack) {
      if (!best || Math.abs((it[0] + it[1]) / 2 - at) < Math.abs((best[0] + best[1]) / 2 - at)) best = it;
    }
  }
  return { entry: e, row, item: best };
}

function click(x, y) {
  if (x < LABEL) {
    const h = hit(LABEL + 1, y);
    if (h && h.entry.track.rows > FOLDED_ROWS) {
      const id = h.entry.track.id;
      if (state.expanded.has(id)) state.expanded.delete(id); else state.expanded.add(id);
      layout(); changed();
    }
    return;
  }
  const h = hit(x, y);
  if (!h || !h.item) return;
  const [s, e, slice, count] = h.item;
  if (count > 1) {
    showTab('details');
    $('details').innerHTML = `<p>${count} slices merged here, ${fmtDur(e - s)} in all (the longest is ` +
      `<b>${esc(state.names.get(h.item[5]) || '')}</b>). Zoom in (W) to see them one by one.</p>`;
    return;
  }
  selectSlice(slice);
}

async function selectSlice(id) {
  const d = await getJSON(`api/slice?id=${id}`);
  state.selected = { id };
  state.details = d;
  showDetails(d);
  draw();
  return d;
}

function link(s) {
  return `<a data-slice="${s.id}">${esc(s.name)}</a> <span>(${esc(s.kind)}, ${fmtDur(s.dur)} at ${fmtDur(s.start)})</span>`;
}

function showDetails(d) {
  showTab('details');
  let h = `<h2>${esc(d.name)}</h2><table class="args">` +
    `<tr><td>kind</td><td>${esc(d.kind)}</td></tr>` +
    `<tr><td>category</td><td>${esc(d.category)}</td></tr>` +
    `<tr><td>start</td><td>${fmtDur(d.start)}</td></tr>` +
    `<tr><td>duration</td><td>${fmtDur(d.dur)}</td></tr>` +
    `<tr><td>track</td><td>${esc(d.track === null ? '' : state.meta.tracks[d.track].name)}</td></tr></table>`;
  if (d.args.length) {
    h += '<h3>args</h3><table class="args">' +
      d.args.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join('') + '</table>';
  }
  if (d.launch) h += `<h3>launched by</h3><p>${link(d.launch)}</p>`;
  if (d.op) h += `<h3>op</h3><p>${link(d.op)}</p>`;
  if (d.kernels.length) {
    h += `<h3>launched ${d.launched}</h3><ul>` + d.kernels.map((k) => `<li>${link(k)}</li>`).join('') + '</ul>';
  }
  const t = d.totals;
  h += `<h3>every ${esc(d.kind)} named so</h3><table class="args">` +
    `<tr><td>count</td><td>${t.count}</td></tr><tr><td>total</td><td>${fmtDur(t.total)}</td></tr>` +
    `<tr><td>mean</td><td>${fmtDur(t.mean)}</td></tr><tr><td>min / max</td><td>${fmtDur(t.min)} / ${fmtDur(t.max)}</td></tr></table>`;
  $('details').innerHTML = h;
}

$('details').addEventListener('click', async (ev) => {
  const id = ev.target.dataset && ev.target.dataset.slice;
  if (id === undefined) return;
  focusSlice(await selectSlice(+id));
});

// Brings a slice into view, a third of the width, its track on screen.
function focusSlice(s) {
  const width = Math.max(s.dur * 3, 1000);
  if (!(s.start >= state.start && s.start + s.dur <= state.end) || s.dur < (state.end - state.start) / 200) {
    setView(s.start + s.dur / 2 - width / 2, s.start + s.dur / 2 + width / 2);
  }
  const e = s.track === null ? null : state.byId.get(s.track);
  if (e && (e.y < state.scrollY || e.y + e.h > state.scrollY + viewHeight())) scrollTo(e.y - 40);
  changed();
}

async function showSelection() {
  const [a, b] = state.selection;
  showTab('selection');
  $('selection').innerHTML = `<p>${fmtDur(a)} to ${fmtDur(b)} (${fmtDur(b - a)}): computing…</p>`;
  const html = await getText(`api/window?start=${Math.floor(a)}&end=${Math.ceil(b)}`);
  $('selection').innerHTML = `<p>${fmtDur(a)} to ${fmtDur(b)} (${fmtDur(b - a)}): host work that starts in the span, and the device work it launched.</p>` + html;
}

function showTab(name) {
  for (const b of document.querySelectorAll('aside nav button')) b.classList.toggle('on', b.dataset.tab === name);
  for (const t of document.querySelectorAll('.tab')) t.hidden = t.id !== name;
  if (name === 'reports' && !state.panelsLoaded) loadPanels();
}
for (const b of document.querySelectorAll('aside nav button')) b.addEventListener('click', () => showTab(b.dataset.tab));

async function loadPanels() {
  state.panelsLoaded = true;
  try { $('reports').innerHTML = await getText('api/panels'); } catch (e) { $('reports').textContent = String(e); }
}
// A finding about a time span (data-span: its start and end, trace ns) shows that span.
$('reports').addEventListener('click', (ev) => {
  const link = ev.target.closest('[data-span]');
  if (!link) return;
  ev.preventDefault();
  const [a, b] = link.dataset.span.split(',').map(Number);
  const pad = Math.max((b - a) * 0.05, 1000);
  setView(a - state.meta.origin - pad, b - state.meta.origin + pad);
});

$('search').addEventListener('keydown', async (ev) => {
  if (ev.key !== 'Enter') return;
  const q = $('search').value.trim();
  if (!q) return;
  const after = state.details ? state.details.start : -1;
  const r = await getJSON(`api/search?q=${encodeURIComponent(q)}&after=${after}`);
  $('found').textContent = r.matches ? `${r.matches} match${r.matches > 1 ? 'es' : ''}` : 'no match';
  if (r.slice) focusSlice(await selectSlice(r.slice.id));
});
$('fit').addEventListener('click', fit);
// The critical path (`opscope critical-path`): its slices outlined in red and joined by
// red lines, or off again.
async function toggleCritical() {
  if (state.critical) { state.critical = null; status(''); changed(); return; }
  try {
    const r = await getJSON('api/critical-path');
    if (r.error) { status('critical path: ' + r.error); return; }
    state.critical = new Set(r.slices);
    state.criticalEdges = r.edges || [];
    status(`critical path: ${fmtDur(r.length_ns)}, ` +
      r.summary.map((b) => `${b.bound_by} ${b.pct.toFixed(1)} %`).join(', '));
    changed();
  } catch (e) { status(String(e)); }
}
$('critical').addEventListener('click', toggleCritical);

// ---- starting, and following a live job ----

async function loadMeta() {
  const m = await getJSON('api/meta');
  state.kinds = m.kinds;
  return m.meta;
}

function fmtBytes(b) {
  return b >= 1e9 ? (b / 1e9).toFixed(2) + ' GB' : (b / 1e6).toFixed(b >= 1e7 ? 0 : 1) + ' MB';
}

function showTitle() {
  const m = state.meta;
  $('title').textContent = `${m.title} · ${m.events.toLocaleString()} events · ${fmtDur(m.span)}`;
}

// While the trace loads the server shows drafts of it: what has been read so far.
function loadingStatus(m) {
  if (m.loading) {
    const { done, total } = m.loading;
    // A pipe's size is not known, nor, until a file ends, how far a format that does
    // not say it is.
    const read = total && done ? `${Math.min(100, Math.floor(100 * done / total))} % of ${fmtBytes(total)} read; `
      : total ? `${fmtBytes(total)}; ` : '';
    status(`loading: ${read}showing the ${m.events.toLocaleString()} events read so far`);
  } else if ((state.message || '').startsWith('loading: ')) status('');
}

// A live job's reload that failed, or a load that stopped part way.
function noteStatus(m) {
  const noted = m.live ? 'live: ' : 'stopped: ';
  if (m.note) status(noted + m.note + (m.live ? '' : ` (showing the ${m.events.toLocaleString()} events read before)`));
  else if ((state.message || '').startsWith(noted)) status('');
}

async function follow() {
  let m;
  try { m = await loadMeta(); } catch (e) { status('the viewer stopped: ' + e); return; }
  noteStatus(m);
  const wasLoading = state.meta.loading;
  state.meta.loading = m.loading;
  if (m.generation === state.generation) { if (!m.note) loadingStatus(state.meta); return; }
  const shift = m.origin - state.meta.origin;
  state.generation = m.generation;
  state.meta = m;
  showTitle();
  if (!m.note) loadingStatus(m);
  layout();
  if (wasLoading) {
    // Slices are numbered anew in each draft: a selection would point elsewhere.
    state.selected = null;
    if (!state.moved) {
      fit(false);
      loadSteps().catch((e) => state.errors.push(String(e)));
    } else setView(state.start - shift, state.end - shift, false);
  } else if ($('follow').checked) {
    const width = state.end - state.start;
    setView(m.span - width, m.span);
  } else {
    setView(state.start - shift, state.end - shift);
  }
  if (state.panelsLoaded && !$('reports').hidden) loadPanels();
  else state.panelsLoaded = false;
}

async function start() {
  state.meta = await loadMeta();
  state.generation = state.meta.generation;
  document.title = 'opscope view: ' + state.meta.title;
  showTitle();
  resize();
  layout();
  new ResizeObserver(() => { resize(); changed(); }).observe(canvas);
  fit(false);
  loadSteps().catch((e) => state.errors.push(String(e)));
  if (state.meta.live) {
    $('followbox').hidden = false;
    setInterval(follow, 1000);
  } else if (state.meta.note) {
    noteStatus(state.meta);
  } else if (state.meta.loading) {
    loadingStatus(state.meta);
    const timer = setInterval(async () => {
      await follow();
      if (!state.meta.loading) clearInterval(timer);
    }, 250);
  }
}

start().catch((e) => { state.errors.push(String(e)); document.body.textContent = String(e); });
setInterval(() => { if (state.meta && !state.inFlight) status(); }, 500);
