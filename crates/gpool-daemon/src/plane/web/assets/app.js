// gpool's web dashboard (docs/dashboard.md). One page script, no build
// step: it reads the path, asks the API for what the page shows with the
// token kept in this browser session, and draws it. The event stream
// (/api/v1/events) redraws the page when something happens.
'use strict';
(() => {
  const TOKEN = 'gpool.token';
  const main = document.getElementById('main');
  const status = document.getElementById('status');
  let me = null;
  let redraw = null;
  let stops = [];

  // ----- small helpers -----
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  // Text for HTML built as a string (the heat map).
  const esc = (x) => String(x).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  const fmt = (x, d = 1) => (x === null || x === undefined || Number.isNaN(x) ? '–' : Number(x).toFixed(d));
  const money = (x) => (x === null || x === undefined ? '–' : '$' + Number(x).toFixed(2));
  function dur(s) {
    if (s === null || s === undefined) return '–';
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
    return Math.floor(s / 86400) + 'd' + Math.floor((s % 86400) / 3600) + 'h';
  }
  const since = (iso) => (iso ? dur((Date.now() - Date.parse(iso)) / 1000) : '–');
  const say = (text) => { status.textContent = text; };

  async function api(path, opts = {}) {
    const token = sessionStorage.getItem(TOKEN);
    const headers = Object.assign({}, opts.headers || {});
    if (token) headers.Authorization = 'Bearer ' + token;
    const res = await fetch('/api/v1' + path, Object.assign({}, opts, { headers }));
    if (res.status === 401) {
      sessionStorage.removeItem(TOKEN + '.me');
      me = null;
      toLogin();
      throw new Error('log in first');
    }
    if (!res.ok) {
      let msg = res.status + ' ' + res.statusText;
      try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
      throw new Error(msg);
    }
    const kind = res.headers.get('content-type') || '';
    return kind.includes('json') ? res.json() : res.text();
  }

  // Reads a streamed response line by line (server-sent events, followed logs).
  function stream(path, onLine) {
    const ctl = new AbortController();
    const token = sessionStorage.getItem(TOKEN);
    fetch('/api/v1' + path, { headers: token ? { Authorization: 'Bearer ' + token } : {}, signal: ctl.signal })
      .then(async (res) => {
        if (!res.ok || !res.body) return;
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n')) >= 0) {
            onLine(buf.slice(0, i));
            buf = buf.slice(i + 1);
          }
        }
      })
      .catch(() => { /* aborted, or the daemon went away */ });
    stops.push(() => ctl.abort());
  }

  // Events of the server-sent stream as objects.
  function events(path, onEvent) {
    stream(path, (line) => {
      if (!line.startsWith('data:')) return;
      try { onEvent(JSON.parse(line.slice(5))); } catch (_) { /* keep-alive or partial */ }
    });
  }

  function table(cols, rows, opts = {}) {
    // cols: [{key, label, num, render(row)}]; sortable by a header button.
    let sortKey = opts.sort || null;
    let asc = opts.asc !== false;
    const wrap = h('div');
    function draw() {
      const sorted = rows.slice();
      if (sortKey) {
        const col = cols.find((c) => c.key === sortKey);
        const val = col.value || ((r) => r[sortKey]);
        sorted.sort((a, b) => {
          const x = val(a), y = val(b);
          const c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x ?? '').localeCompare(String(y ?? ''));
          return asc ? c : -c;
        });
      }
      const head = h('tr', {}, cols.map((c) => h('th', {
        class: c.num ? 'num' : null,
        scope: 'col',
        'aria-sort': sortKey === c.key ? (asc ? 'ascending' : 'descending') : null,
      }, c.nosort ? c.label : h('button', {
        type: 'button',
        onclick: () => { asc = sortKey === c.key ? !asc : true; sortKey = c.key; draw(); },
      }, c.label))));
      const body = sorted.map((r) => h('tr', {}, cols.map((c) => h('td', { class: c.num ? 'num' : null },
        c.render ? c.render(r) : (r[c.key] ?? '–')))));
      wrap.replaceChildren(h('table', { 'aria-label': opts.label || null }, h('thead', {}, head),
        h('tbody', {}, body.length ? body : h('tr', {}, h('td', { colspan: cols.length, class: 'muted' }, opts.empty || 'nothing')))));
    }
    draw();
    return wrap;
  }

  function heatColor(v) {
    if (v === null || v === undefined) return '#eeeeee';
    const t = Math.max(0, Math.min(100, v)) / 100;
    // From pale to the accent blue: contrast is carried by the border and the title too.
    const c = (a, b) => Math.round(a + (b - a) * t);
    return `rgb(${c(232, 11)},${c(240, 92)},${c(250, 173)})`;
  }

  function chart(el, title, times, series, unit) {
    if (!window.uPlot || times.length < 2) {
      el.append(h('p', { class: 'muted' }, title + ': not enough samples yet'));
      return;
    }
    const palette = ['#0b5cad', '#a4000f', '#1d6b2f', '#8a4b00', '#6a3d9a', '#00838f', '#5d4037', '#c2185b'];
    const opts = {
      title,
      width: Math.min(900, el.clientWidth || 900),
      height: 220,
      series: [{}].concat(series.map((s, i) => ({ label: s.label, stroke: palette[i % palette.length], width: 1.5 }))),
      axes: [{}, { label: unit }],
    };
    const holder = h('div', { role: 'img', 'aria-label': title });
    el.append(holder);
    new window.uPlot(opts, [times].concat(series.map((s) => s.values)), holder);
  }

  // Who the token is, kept beside it: valid only for that very token.
  function remember(who) {
    sessionStorage.setItem(TOKEN + '.me', JSON.stringify({ token: sessionStorage.getItem(TOKEN), who }));
  }
  function remembered() {
    try {
      const r = JSON.parse(sessionStorage.getItem(TOKEN + '.me') || 'null');
      return r && r.token === sessionStorage.getItem(TOKEN) ? r.who : null;
    } catch (_) { return null; }
  }

  // ----- pages -----
  function toLogin() {
    if (location.pathname !== '/login') {
      history.pushState({}, '', '/login?next=' + encodeURIComponent(location.pathname + location.search));
    }
    route();
  }

  function loginPage() {
    const input = h('input', { id: 'token', type: 'password', autocomplete: 'current-password', required: true });
    const err = h('p', { class: 'error', role: 'alert' });
    const form = h('form', {
      class: 'login',
      onsubmit: async (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN, input.value.trim());
        try {
          me = await api('/whoami');
          remember(me);
          const next = new URLSearchParams(location.search).get('next') || '/';
          go(next.startsWith('/') && !next.startsWith('//') ? next : '/');
        } catch (x) {
          sessionStorage.removeItem(TOKEN);
          err.textContent = 'That token was not accepted: ' + x.message;
        }
      },
    }, h('h1', {}, 'Log in to gpool'),
    h('label', { for: 'token' }, 'API token (gpool token create, or the admin token of gpool up)'), input,
    h('button', { type: 'submit', class: 'act' }, 'Log in'), err);
    main.replaceChildren(form);
    input.focus();
  }

  // Marks the first paint of a page's data (`gpool:drawn`, for
  // scripts/dashboard_weight.py): after the next frame, so the mark follows the paint.
  function painted() {
    if (performance.getEntriesByName('gpool:drawn').length) return;
    requestAnimationFrame(() => setTimeout(() => {
      if (!performance.getEntriesByName('gpool:drawn').length) performance.mark('gpool:drawn');
    }, 0));
  }

  // The heat map being drawn: a newer drawing stops an older one's remaining slices.
  let heatDrawing = 0;
  async function overviewPage() {
    // Both at once: the usage table need not wait for the overview.
    const firstUsage = api('/cost?by=team&since=1d');
    firstUsage.catch(() => {});
    const o = await api('/overview');
    const total = o.gpus.reduce((a, g) => ({
      busy: a.busy + g.busy, idle: a.idle + g.idle, free: a.free + g.free, down: a.down + g.down,
    }), { busy: 0, idle: 0, free: 0, down: 0 });
    const card = (label, value, note) => h('div', { class: 'card' }, h('div', { class: 'muted' }, label),
      h('div', { class: 'big', 'data-testid': label }, value), note ? h('div', { class: 'muted' }, note) : null);
    let metric = 'util';
    const heat = h('div', { class: 'heat', 'aria-label': 'GPU heat map' });
    // The cells as HTML strings, parsed a slice of nodes at a time: 8,000
    // cells built one element at a time took most of the page's time on
    // 1,000 nodes, and the first slice (what the screen shows) need not wait
    // for the rest.
    function nodeHtml(n) {
      const degraded = new Set(n.degraded || []), shared = new Set(n.shared || []), out = new Set(n.quarantined || []);
      const parts = [`<div class="node${n.state === 'up' ? '' : ' down'}" title="${esc(n.node)}"><div class="muted">${esc(n.node)}</div><div class="cells">`];
      n.index.forEach((index, i) => {
        const [util, mem, job] = [n.util[i], n.memory[i], n.job[i]];
        const title = `${n.node} GPU ${index}: ${util ?? '–'}% busy, ${mem ?? '–'}% memory` +
          (job ? `, job ${job}` : shared.has(i) ? ', shared' : ', free') + (degraded.has(i) ? ', degraded' : '') +
          (out.has(i) ? ', quarantined for a fault (gpool health)' : '');
        parts.push(`<a class="cell${degraded.has(i) ? ' degraded' : ''}${out.has(i) ? ' quarantined' : ''}"${job ? ` href="/jobs/${Number(job)}"` : ''}` +
          ` style="background:${heatColor(metric === 'util' ? util : mem)}" title="${esc(title)}" aria-label="${esc(n.node)} GPU ${Number(index)}"></a>`);
      });
      parts.push('</div></div>');
      return parts.join('');
    }
    function drawHeat() {
      const SLICE = 150;
      const me = ++heatDrawing;
      heat.innerHTML = o.heat.slice(0, SLICE).map(nodeHtml).join('');
      const more = (from) => {
        if (me !== heatDrawing || from >= o.heat.length) return;
        heat.insertAdjacentHTML('beforeend', o.heat.slice(from, from + SLICE).map(nodeHtml).join(''));
        setTimeout(() => more(from + SLICE), 0);
      };
      setTimeout(() => more(SLICE), 0);
    }
    drawHeat();
    const toggle = h('select', { 'aria-label': 'Heat map shows', onchange: (e) => { metric = e.target.value; drawHeat(); } },
      h('option', { value: 'util' }, 'utilisation'), h('option', { value: 'memory' }, 'memory'));
    const usage = h('div', {}, h('p', { class: 'muted' }, 'Loading usage…'));
    const period = h('select', { 'aria-label': 'Usage period', onchange: () => loadUsage() },
      h('option', { value: '1d' }, 'last day'), h('option', { value: '7d' }, 'last week'), h('option', { value: '30d' }, 'last month'));
    async function loadUsage(first) {
      try {
        const r = await (first || api('/cost?by=team&since=' + period.value));
        usage.replaceChildren(table([
          { key: 'key', label: 'Team' },
          { key: 'gpu_hours', label: 'GPU-hours', num: true, render: (x) => fmt(x.gpu_hours, 2) },
          { key: 'dollars', label: 'Cost', num: true, render: (x) => money(x.dollars) },
          { key: 'energy_wh', label: 'Energy kWh', num: true, render: (x) => fmt(x.energy_wh / 1000, 2) },
          { key: 'jobs', label: 'Jobs', num: true },
        ], r.rows, { sort: 'gpu_hours', asc: false, label: 'GPU-hours and cost per team', empty: 'no job ran in this period' }));
      } catch (x) { usage.replaceChildren(h('p', { class: 'error' }, x.message)); }
    }
    main.replaceChildren(
      h('h1', {}, 'Overview'),
      h('div', { class: 'cards' },
        card('GPUs busy', total.busy), card('GPUs idle', total.idle, 'held, under 5% busy'), card('GPUs free', total.free),
        card('GPUs down', total.down), card('Jobs pending', o.pending, 'waiting p50 ' + dur(o.wait_p50_s) + ', p90 ' + dur(o.wait_p90_s) + ', longest ' + dur(o.wait_max_s)),
        card('Jobs running', o.running), card('Alerts firing', o.alerts.length)),
      h('h2', {}, 'GPUs per pool and model'),
      table([
        { key: 'pool', label: 'Pool' }, { key: 'model', label: 'Model' }, { key: 'kind', label: 'Kind' },
        { key: 'busy', label: 'Busy', num: true }, { key: 'idle', label: 'Idle', num: true },
        { key: 'free', label: 'Free', num: true }, { key: 'down', label: 'Down', num: true },
      ], o.gpus, { label: 'GPUs per pool and model', empty: 'no GPUs' }),
      h('h2', {}, 'Every GPU ', toggle, h('span', { class: 'legend' }, h('i', { style: 'background:' + heatColor(0) }), '0%',
        h('i', { style: 'background:' + heatColor(50) }), '50%', h('i', { style: 'background:' + heatColor(100) }), '100%',
        h('i', { style: 'background:#eee;outline:2px solid #a4000f' }), 'degraded',
        h('i', { class: 'quarantined-key' }), 'quarantined')),
      heat,
      h('h2', {}, 'GPU-hours and cost per team ', period), usage,
      h('h2', {}, 'Alerts firing'),
      table([
        { key: 'severity', label: 'Severity', render: (a) => h('span', { class: 'sev-' + a.severity }, a.severity) },
        { key: 'rule', label: 'Rule' }, { key: 'summary', label: 'What' }, { key: 'since', label: 'For', render: (a) => since(a.since) },
      ], o.alerts, { label: 'Alerts', empty: 'none' }));
    loadUsage(firstUsage);
    painted();
    redraw = overviewPage;
  }

  function canTouch(j) {
    return me && (me.role === 'admin' || j.user === me.user);
  }

  async function holdJob(id, hold) {
    try {
      await api(`/jobs/${id}/${hold ? 'hold' : 'release'}`, { method: 'POST' });
      say(`job ${id}: ${hold ? 'held' : 'released'}`);
      if (redraw) redraw();
    } catch (x) { say(`job ${id}: ${x.message}`); }
  }

  // Hold or release, for a pending job the token may touch.
  function holdButton(j, after) {
    if (!canTouch(j) || j.state !== 'pending') return '';
    const held = (j.reason || '').startsWith('held by ');
    return h('button', { class: 'act', type: 'button', 'aria-label': `${held ? 'Release' : 'Hold'} job ${j.id}`,
      onclick: async () => { await holdJob(j.id, !held); if (after) after(); } }, held ? 'Release' : 'Hold');
  }

  async function cancel(id) {
    if (!confirm(`Cancel job ${id}?`)) return;
    try {
      await api(`/jobs/${id}/cancel`, { method: 'POST' });
      say(`job ${id}: cancel requested`);
      if (redraw) redraw();
    } catch (x) { say(`job ${id}: ${x.message}`); }
  }

  const gpusOf = (j) => {
    const r = (j.spec && j.spec.resources) || {};
    const parts = Object.entries(r).filter(([k]) => k !== 'cpu' && k !== 'memory').map(([k, v]) => `${k}: ${v}`);
    const rep = j.spec && j.spec.replicas;
    // An elastic job's replicas are {min, max}: say how many run of how many it may.
    const n = rep && typeof rep === 'object' ? `${j.running_replicas || 0} of ${rep.min}–${rep.max}× ` : rep > 1 ? rep + '× ' : '';
    return parts.length ? n + parts.join(' ') : '–';
  };

  async function queuePage() {
    const q = new URLSearchParams(location.search);
    const state = q.get('state') || 'pending,running';
    const f = { user: q.get('user') || '', queue: q.get('queue') || '', text: q.get('q') || '' };
    // The server filters by state, user and queue and pages by 200; the
    // name-or-reason filter applies to what is loaded.
    const ask = new URLSearchParams({ state, limit: '200' });
    if (f.user) ask.set('user', f.user);
    if (f.queue) ask.set('queue', f.queue);
    let all = [];
    let next = null;
    async function load() {
      const page = await api('/jobs?' + ask.toString() + (next ? '&after=' + next : ''));
      all = all.concat(page.jobs);
      next = page.next;
    }
    await load();
    const body = h('div');
    function draw() {
      const jobs = all.filter((j) => !f.text || (j.name + ' ' + (j.reason || '')).toLowerCase().includes(f.text.toLowerCase()));
      // Position: pending jobs by priority, then submission (the order the
      // queue takes them in, before fair share and backfill).
      jobs.filter((j) => j.state === 'pending').sort((a, b) => b.priority - a.priority || a.id - b.id).forEach((j, i) => { j.position = i + 1; });
      body.replaceChildren(h('h1', {}, `Queue (${jobs.length}${next ? '+' : ''} jobs)`), form, table([
        { key: 'position', label: '#', num: true, value: (j) => j.position ?? 1e9, render: (j) => j.position ?? '' },
        { key: 'id', label: 'Job', num: true, render: (j) => h('a', { href: '/jobs/' + j.id }, j.id) },
        { key: 'name', label: 'Name' }, { key: 'user', label: 'User' }, { key: 'queue', label: 'Queue' },
        { key: 'state', label: 'State', render: (j) => h('span', { class: 'state-' + j.state }, j.state) },
        { key: 'gpus', label: 'Asks for', value: gpusOf, render: gpusOf },
        { key: 'priority', label: 'Priority', num: true },
        { key: 'for', label: 'For', value: (j) => Date.parse(j.started_at || j.submitted_at),
          render: (j) => since(j.state === 'running' ? j.started_at : j.submitted_at) },
        { key: 'reason', label: 'Why it waits', render: (j) => (j.reason || '') + (j.estimated_start ? ` (expected to start ${new Date(j.estimated_start).toLocaleString()})` : '') },
        { key: 'act', label: '', nosort: true, render: (j) => canTouch(j)
          ? h('span', {}, holdButton(j), ' ', h('button', { class: 'act danger', type: 'button', onclick: () => cancel(j.id), 'aria-label': `Cancel job ${j.id}` }, 'Cancel')) : '' },
      ], jobs, { sort: 'position', label: 'Jobs', empty: 'no job matches' }),
      ...(next ? [h('button', { class: 'act', type: 'button', onclick: async () => { await load(); draw(); } }, 'Load 200 more')] : []));
    }
    const input = (name, label, value) => h('label', {}, label, h('input', { name, value, size: 12 }));
    const stateSel = h('select', { name: 'state' }, [['pending,running', 'pending and running'], ['pending', 'pending'], ['running', 'running']]
      .map(([v, l]) => h('option', { value: v, selected: v === state }, l)));
    const form = h('form', {
      class: 'filters',
      role: 'search',
      onsubmit: (e) => {
        e.preventDefault();
        const p = new URLSearchParams(new FormData(e.target));
        for (const [k, v] of [...p.entries()]) if (!v) p.delete(k);
        go('/queue?' + p.toString());
      },
    }, h('label', {}, 'State', stateSel), input('user', 'User', f.user), input('queue', 'Queue', f.queue),
    input('q', 'Name or reason', f.text), h('button', { class: 'act', type: 'submit' }, 'Filter'));
    draw();
    main.replaceChildren(body);
    painted();
    redraw = queuePage;
  }

  async function jobPage(id) {
    const [j, usage, advice] = await Promise.all([
      api('/jobs/' + id),
      api(`/jobs/${id}/usage`).catch(() => null),
      api(`/jobs/${id}/advice`).catch(() => null),
    ]);
    const timeline = h('ul', { class: 'timeline', 'aria-label': 'State timeline' });
    const logs = h('pre', { class: 'logs', tabindex: 0, 'aria-label': 'Logs of rank 0', 'aria-live': 'off' });
    const charts = h('div');
    const s = (usage && usage.summary) || j.usage || {};
    main.replaceChildren(
      h('h1', {}, `Job ${j.id}: ${j.name} `, h('span', { class: 'state-' + j.state, 'data-testid': 'job-state' }, j.state)),
      h('p', {}, `${j.user} (${j.team}), queue ${j.queue}, priority ${j.priority}, asks for ${gpusOf(j)}. `,
        j.reason ? h('strong', {}, 'Waiting: ' + j.reason + '. ') : null,
        j.estimated_start ? `Backfill expects it to start ${new Date(j.estimated_start).toLocaleString()}. ` : null,
        holdButton(j, () => route()), ' ',
        canTouch(j) && !['succeeded', 'failed', 'cancelled', 'timed_out'].includes(j.state)
          ? h('button', { class: 'act danger', type: 'button', onclick: () => cancel(j.id) }, 'Cancel job') : null),
      h('div', { class: 'cards' },
        h('div', { class: 'card' }, h('div', { class: 'muted' }, 'GPU-hours'), h('div', { class: 'big' }, fmt(s.gpu_hours, 3))),
        h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Cost'), h('div', { class: 'big' }, money(s.cost_usd))),
        h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Mean utilisation'), h('div', { class: 'big' }, fmt(s.mean_gpu_util, 0) + '%')),
        h('div', { class: 'card' }, h('div', { class: 'muted' }, 'GPU energy'), h('div', { class: 'big' }, s.energy_wh ? fmt(s.energy_wh / 1000, 2) + ' kWh' : '–'))),
      h('h2', {}, 'Timeline'), timeline,
      h('h2', {}, 'Devices'),
      table([
        { key: 'rank', label: 'Rank', num: true }, { key: 'node', label: 'Node' },
        { key: 'gpus', label: 'GPUs', render: (r) => (r.gpus || []).join(', ') || (r.mig || []).join(', ') || '–' },
        { key: 'cuda_visible_devices', label: 'CUDA_VISIBLE_DEVICES' },
      ], j.replicas || [], { label: 'Replicas', empty: 'not running' }),
      // An elastic job's size over time: each resize and why (replaceChildren would print a null).
      ...((j.resizes || []).length ? [h('h2', {}, 'Size over time'), table([
        { key: 'at', label: 'When', render: (r) => new Date(r.at).toLocaleString() },
        { key: 'from', label: 'From', num: true }, { key: 'to', label: 'To', num: true }, { key: 'why', label: 'Why' },
      ], j.resizes, { label: 'Resizes' })] : []),
      h('h2', {}, 'Utilisation and memory'), charts,
      h('h2', {}, 'Advice'),
      advice && advice.findings.length
        ? h('ul', {}, advice.findings.map((f) => h('li', {}, h('strong', {}, f.kind.replace(/_/g, ' ') + ': '), f.summary,
          f.suggestions && f.suggestions.length ? h('ul', {}, f.suggestions.map((x) => h('li', {}, x))) : null)))
        : h('p', { class: 'muted' }, 'no findings yet'),
      h('h2', {}, 'Logs (rank 0, followed live)'), logs,
      h('h2', {}, 'Spec'), h('pre', { class: 'spec' }, JSON.stringify(j.spec, null, 2)));
    if (usage && usage.points.length) {
      const devices = [...new Set(usage.points.map((p) => p.device))];
      const times = [...new Set(usage.points.map((p) => Date.parse(p.at) / 1000))].sort((a, b) => a - b);
      const at = new Map(times.map((t, i) => [t, i]));
      const col = (key, scale) => devices.map((d) => {
        const v = new Array(times.length).fill(null);
        for (const p of usage.points) if (p.device === d && p[key] !== undefined) v[at.get(Date.parse(p.at) / 1000)] = p[key] / scale;
        return { label: d, values: v };
      });
      chart(charts, 'GPU utilisation (%)', times, col('gpu_util', 1), '%');
      chart(charts, 'GPU memory (GiB)', times, col('memory_mb', 1024), 'GiB');
    } else {
      charts.append(h('p', { class: 'muted' }, 'no samples yet'));
    }
    events(`/events?after=0&job=${id}`, (e) => {
      timeline.append(h('li', {}, h('time', { datetime: e.at }, new Date(e.at).toLocaleString()), ` ${e.kind}: ${e.message}`));
    });
    if (j.started_at) {
      stream(`/jobs/${id}/logs?follow=true`, (line) => {
        logs.append(line + '\n');
        logs.scrollTop = logs.scrollHeight;
      });
    } else {
      logs.textContent = 'no output yet: the job has not started';
    }
    redraw = null; // the job page follows its own streams
  }

  async function nodesPage() {
    // Fifty nodes a page: a page of a thousand nodes' devices would be megabytes.
    const PER = 50;
    const page = Math.max(0, parseInt(new URLSearchParams(location.search).get('page') || '0', 10) || 0);
    const got = await api(`/nodes?offset=${page * PER}&limit=${PER + 1}`);
    const nodes = got.slice(0, PER);
    const pager = h('p', {}, page > 0 ? h('a', { href: `/nodes?page=${page - 1}` }, '← previous 50') : null, ' ',
      got.length > PER ? h('a', { href: `/nodes?page=${page + 1}` }, 'next 50 →') : null);
    const admin = me && me.role === 'admin';
    async function act(name, what) {
      try { await api(`/nodes/${encodeURIComponent(name)}/${what}`, { method: 'POST' }); say(`node ${name}: ${what}`); nodesPage(); } catch (x) { say(x.message); }
    }
    main.replaceChildren(h('h1', {}, `Nodes ${page * PER + 1}–${page * PER + nodes.length}`), pager, ...nodes.map((n) => h('section', { 'aria-label': 'node ' + n.name },
      h('h2', {}, `${n.name} `, h('span', { class: 'muted' }, `${n.state}, pool ${n.pool}, ${n.source}, ${n.free_cpus}/${n.cpus} CPUs free, jobs ${n.jobs.join(', ') || 'none'} `),
        admin ? h('button', { class: 'act', type: 'button', onclick: () => act(n.name, n.state === 'draining' ? 'resume' : 'drain') },
          n.state === 'draining' ? 'Resume' : 'Drain') : null),
      ...(n.conditions || []).map((c) => h('p', { class: 'error' }, 'condition: ' + c)),
      ...(n.degraded || []).map((c) => h('p', { class: 'muted' }, 'device layer: ' + c)),
      table([
        { key: 'index', label: 'GPU', num: true }, { key: 'model', label: 'Model' },
        { key: 'util', label: 'Util', num: true, value: (d) => d.telemetry?.gpu_util ?? -1, render: (d) => fmt(d.telemetry?.gpu_util, 0) + '%' },
        { key: 'mem', label: 'Memory', num: true, value: (d) => d.telemetry?.memory_used_mb ?? -1,
          render: (d) => d.telemetry?.memory_used_mb !== undefined ? fmt(d.telemetry.memory_used_mb / 1024, 1) + ' / ' + fmt(d.memory_mb / 1024, 0) + ' GiB' : '–' },
        { key: 'temp', label: 'Temp', num: true, value: (d) => d.telemetry?.temperature_c ?? -1, render: (d) => fmt(d.telemetry?.temperature_c, 0) + ' °C' },
        { key: 'power', label: 'Power', num: true, value: (d) => d.telemetry?.power_w ?? -1, render: (d) => fmt(d.telemetry?.power_w, 0) + ' W' },
        { key: 'job', label: 'Held by', render: (d) => d.job ? h('a', { href: '/jobs/' + d.job }, 'job ' + d.job)
          : (d.shares || []).length ? 'shared: ' + d.shares.map((x) => x.job).join(', ') : (d.mig || []).length ? 'MIG: ' + d.mig.map((m) => m.profile + (m.job ? ' job ' + m.job : ' free')).join(', ') : 'free' },
        { key: 'degraded', label: 'Health', render: (d) => d.quarantine
          ? h('span', { class: 'sev-critical' }, `quarantined: ${d.quarantine.fault} at ${d.quarantine.since}` + (d.quarantine.action ? `, ${d.quarantine.action}` : ''))
          : d.degraded ? h('span', { class: 'sev-warning' }, 'degraded: ' + d.degraded) : 'ok' },
      ], n.devices, { label: 'Devices of ' + n.name, empty: 'no accelerators' }))));
    painted();
    redraw = nodesPage;
  }

  async function usagePage() {
    const q = new URLSearchParams(location.search);
    const by = q.get('by') || 'team';
    const per = q.get('since') || '7d';
    const [r, budgets] = await Promise.all([
      api(`/cost?by=${encodeURIComponent(by)}&since=${encodeURIComponent(per)}`),
      api('/budgets').catch(() => []),
    ]);
    const most = Math.max(1e-9, ...r.rows.map((x) => x.gpu_hours));
    // GPU-hours per hour or day of the largest groups (the server sums the rest as "others").
    const daily = h('div', { class: 'charts' });
    const steps = r.steps || [];
    const stepKeys = [...new Set(steps.map((d) => d.key))];
    // Every step of the period, those without a job ending included.
    const stepS = (steps.length ? steps[0].step === 'hour' : Date.now() - Date.parse(r.since) <= 2 * 86400e3) ? 3600 : 86400;
    const stepTimes = [];
    for (let t = Math.floor(Date.parse(r.since) / 1000 / stepS) * stepS; t <= Date.now() / 1000; t += stepS) stepTimes.push(t);
    const sel = (name, label, value, options) => h('label', {}, label, h('select', { name, onchange: (e) => {
      const p = new URLSearchParams(location.search); p.set(name, e.target.value); go('/usage?' + p.toString());
    } }, options.map(([v, l]) => h('option', { value: v, selected: v === value }, l))));
    function csv() {
      const esc = (v) => (/[",\n]/.test(String(v)) ? '"' + String(v).replace(/"/g, '""') + '"' : String(v));
      const lines = [[by, 'gpu_hours', 'idle_gpu_hours', 'mean_gpu_util', 'dollars', 'energy_kwh', 'jobs'].join(',')]
        .concat(r.rows.map((x) => [x.key, x.gpu_hours, x.idle_gpu_hours ?? '', x.mean_gpu_util ?? '', x.dollars, (x.energy_wh || 0) / 1000, x.jobs].map(esc).join(',')));
      const a = h('a', { href: URL.createObjectURL(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' })), download: `gpool-usage-by-${by}-${per}.csv` });
      document.body.append(a); a.click(); a.remove();
    }
    main.replaceChildren(h('h1', {}, 'Usage and cost'),
      h('div', { class: 'filters' },
        sel('by', 'Group by', by, [['user', 'user'], ['team', 'team'], ['queue', 'queue'], ['pool', 'pool'], ['job', 'job']]),
        sel('since', 'Period', per, [['1d', 'last day'], ['7d', 'last week'], ['30d', 'last month']]),
        h('button', { class: 'act', type: 'button', onclick: csv }, 'Export CSV')),
      h('p', { class: 'muted' }, `Jobs that ran since ${new Date(r.since).toLocaleString()}: ${money(r.total_dollars)} in all.`),
      daily,
      table([
        { key: 'key', label: by[0].toUpperCase() + by.slice(1) },
        { key: 'gpu_hours', label: 'GPU-hours', num: true, render: (x) => h('span', {}, h('span', { class: 'bar', style: `width:${Math.round(80 * x.gpu_hours / most)}px` }), ' ', fmt(x.gpu_hours, 2)) },
        { key: 'idle_gpu_hours', label: 'Idle GPU-hours', num: true, render: (x) => fmt(x.idle_gpu_hours, 2) },
        { key: 'mean_gpu_util', label: 'Mean util', num: true, render: (x) => fmt(x.mean_gpu_util, 0) + '%' },
        { key: 'dollars', label: 'Cost', num: true, render: (x) => money(x.dollars) },
        { key: 'energy_wh', label: 'Energy kWh', num: true, render: (x) => fmt((x.energy_wh || 0) / 1000, 2) },
        { key: 'jobs', label: 'Jobs', num: true },
      ], r.rows, { sort: 'gpu_hours', asc: false, label: 'Usage by ' + by, empty: 'no job ran in this period' }),
      h('h2', {}, 'Budgets this month'),
      budgets.length ? table([
        { key: 'name', label: 'Budget', render: (b) => b.scope + ' ' + b.name },
        { key: 'percent', label: 'Used', num: true, render: (b) => h('span', {},
          h('meter', { min: 0, max: 100, low: 80, high: 99, optimum: 0, value: Math.min(100, b.percent), 'aria-label': `${b.scope} ${b.name}: ${fmt(b.percent, 0)}% used` }),
          ' ', fmt(b.percent, 0) + '%') },
        { key: 'spent_usd', label: 'Spent', num: true, render: (b) => money(b.spent_usd) },
        { key: 'dollars_per_month', label: 'Per month', num: true, render: (b) => money(b.dollars_per_month) },
        { key: 'mode', label: 'At 100%', render: (b) => b.mode === 'hard' ? 'jobs wait' : 'preemptible only' },
        { key: 'held_jobs', label: 'Held jobs', num: true },
        { key: 'resets_at', label: 'Resets', render: (b) => new Date(b.resets_at).toLocaleDateString() },
      ], budgets, { sort: 'percent', asc: false, label: 'Budgets this month' })
        : h('p', { class: 'muted' }, 'No budgets set: start the control plane with --budgets FILE (docs/cost.md); gpool budgets lists them.'));
    if (by !== 'job' && stepKeys.length) {
      const at = new Map(stepTimes.map((t, i) => [t, i]));
      chart(daily, `GPU-hours per ${stepS === 3600 ? 'hour' : 'day'} by ${by}`, stepTimes, stepKeys.map((k) => {
        const v = new Array(stepTimes.length).fill(0);
        for (const d of steps) if (d.key === k && at.has(Date.parse(d.at) / 1000)) v[at.get(Date.parse(d.at) / 1000)] += d.gpu_hours;
        return { label: k, values: v };
      }), 'GPU-hours');
    }
    painted();
    redraw = usagePage;
  }

  // ----- routing and the live stream -----
  function go(path) {
    history.pushState({}, '', path);
    route();
  }

  let pending = false;
  function onEvent() {
    if (!redraw || pending) return;
    pending = true;
    setTimeout(() => {
      pending = false;
      if (redraw) redraw().catch((x) => say(x.message));
    }, 1000);
  }

  async function route() {
    stops.forEach((s) => s());
    stops = [];
    redraw = null;
    const path = location.pathname;
    document.querySelectorAll('nav a[data-page]').forEach((a) => {
      const here = a.getAttribute('href') === path || (path.startsWith('/jobs/') && a.dataset.page === 'queue');
      if (here) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    });
    if (path === '/login') {
      document.title = 'Log in · gpool';
      loginPage();
      return;
    }
    if (!sessionStorage.getItem(TOKEN)) {
      toLogin();
      return;
    }
    try {
      // Who the token is, asked once per session: each page then starts with its own data.
      if (!me) me = remembered();
      if (!me) {
        me = await api('/whoami');
        remember(me);
      }
      document.getElementById('who').replaceChildren(`${me.user} (${me.role}) `,
        h('button', { class: 'act', type: 'button', onclick: () => { sessionStorage.removeItem(TOKEN); sessionStorage.removeItem(TOKEN + '.me'); me = null; toLogin(); } }, 'Log out'));
      const job = path.match(/^\/jobs\/(\d+)$/);
      const pages = { '/': ['Overview', overviewPage], '/queue': ['Queue', queuePage], '/nodes': ['Nodes', nodesPage], '/usage': ['Usage and cost', usagePage] };
      if (job) {
        document.title = `Job ${job[1]} · gpool`;
        await jobPage(job[1]);
      } else if (pages[path]) {
        document.title = pages[path][0] + ' · gpool';
        await pages[path][1]();
      } else {
        main.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '/' }, 'Overview')));
      }
      events('/events', onEvent);
    } catch (x) {
      if (location.pathname !== '/login') main.replaceChildren(h('p', { class: 'error', role: 'alert' }, x.message));
    }
  }

  document.addEventListener('click', (e) => {
    const a = e.target.closest && e.target.closest('a[href]');
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.hasAttribute('download')) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || url.pathname.startsWith('/api/') || url.pathname.startsWith('/ui/')) return;
    e.preventDefault();
    go(url.pathname + url.search);
  });
  window.addEventListener('popstate', route);
  route();
})();
