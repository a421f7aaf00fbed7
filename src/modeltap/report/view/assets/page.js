// modeltap view: draws the capture embedded in this page (no network, no libraries).
// Every string of the capture goes into the document as text (textContent or an
// attribute value), never as HTML: tool names, arguments and session ids are
// chosen by agents and models.
(function () {
  'use strict';

  var ROW_H = 26;
  var AXIS_H = 22;
  var OVERSCAN = 10;
  var CHANNELS = ['events', 'actions', 'messages', 'usage', 'status', 'data'];
  var EVIDENCE = { events: true, actions: true, status: true, data: true };
  var USAGE = [
    ['input_tokens', 'input'], ['output_tokens', 'output'], ['total_tokens', 'total'],
    ['cache_read_tokens', 'cache read'], ['cache_write_tokens', 'cache write'],
    ['reasoning_tokens', 'reasoning']
  ];

  // ------------------------------------------------------------------ DOM

  function h(tag, props) {
    var el = document.createElement(tag);
    if (props) {
      for (var k in props) {
        var v = props[k];
        if (v === null || v === undefined || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = String(v);
        else if (k.slice(0, 2) === 'on') el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (var i = 2; i < arguments.length; i++) add(el, arguments[i]);
    return el;
  }

  function add(el, kid) {
    if (kid === null || kid === undefined || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach(function (k) { add(el, k); }); return; }
    el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }

  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

  // ------------------------------------------------------------------ formats

  function unknown(text) { return h('span', { class: 'unknown', text: text || 'unknown' }); }

  // Turns are shown numbered from 1 (like seq and every message); the data links by index.
  function turnNo(index) { return index + 1; }

  function msText(ms) {
    if (ms === null || ms === undefined) return null;
    var a = Math.abs(ms);
    if (a < 10) return ms.toFixed(1) + ' ms';
    if (a < 1000) return Math.round(ms) + ' ms';
    if (a < 60000) return (ms / 1000).toFixed(a < 10000 ? 2 : 1) + ' s';
    if (a < 3600000) return (ms / 60000).toFixed(1) + ' min';
    return (ms / 3600000).toFixed(1) + ' h';
  }

  function ms(v, what) { var t = msText(v); return t === null ? unknown(what) : t; }

  function count(v) { return v === null || v === undefined ? unknown() : Number(v).toLocaleString('en-US'); }

  // A total the capture calls unknown (some turn did not report it), with what the
  // turns that did report add up to: a lower bound, said as one, never the total.
  function total(value, turns, field) {
    if (value !== null && value !== undefined) return h('b', { text: Number(value).toLocaleString('en-US') });
    var known = 0, n = 0;
    turns.forEach(function (t) { var v = t.usage[field]; if (v !== null && v !== undefined) { known += v; n++; } });
    return [h('b', null, unknown()), n ? h('span', { class: 'unknown', 'data-role': 'known-part',
      title: 'some turns did not report it; the turns that did add up to this (a lower bound, not the total)',
      text: ' (' + known.toLocaleString('en-US') + ' in ' + n + ' of ' + plural(turns.length, 'turn') + ')' }) : null];
  }

  function allTurns() {
    var out = [];
    DATA.sessions.forEach(function (s) { out = out.concat(s.turns); });
    return out;
  }

  function bytesText(n) {
    if (n === null || n === undefined) return null;
    if (n < 1024) return n + ' B';
    if (n < 1048576) return (n / 1024).toFixed(1) + ' KB';
    return (n / 1048576).toFixed(1) + ' MB';
  }

  function bytes(n) { var t = bytesText(n); return t === null ? unknown() : t; }

  function clock(t) {
    if (t === null || t === undefined) return null;
    var d = new Date(t);
    return isNaN(d.getTime()) ? null : d.toISOString().replace('T', ' ').replace('Z', ' UTC');
  }

  function relText(v) {
    if (v === 0) return '0';
    return '+' + msText(v);
  }

  // A tick's label, as precise as the ticks' step: "+2 s", not "+2.00 s".
  function tickText(v, step) {
    if (v > 0 && v < 60000 && step >= 1000 && step % 1000 === 0) return '+' + v / 1000 + ' s';
    return relText(v);
  }

  function plural(n, one, many) { return n + ' ' + (n === 1 ? one : (many || one + 's')); }

  function value(v) {
    if (v === null || v === undefined) return unknown('null');
    if (typeof v === 'object') return JSON.stringify(v);
    return String(v);
  }

  // A cost estimate as a newer modeltap may write it: a number, or an object
  // with an amount. null is unknown, never 0; an absent field says so.
  function costText(owner) {
    if (!owner || !Object.prototype.hasOwnProperty.call(owner, 'cost')) return undefined;
    var c = owner.cost;
    if (c === null) return null;
    if (typeof c === 'number') return '$' + money(c) + ' (estimate)';
    if (typeof c === 'object') {
      var keys = ['estimate_usd', 'total', 'total_usd', 'usd', 'amount', 'estimate', 'value'];
      for (var i = 0; i < keys.length; i++) {
        if (Object.prototype.hasOwnProperty.call(c, keys[i])) {
          var v = c[keys[i]];
          if (v === null) return null;
          if (typeof v === 'number') {
            var cur = typeof c.currency === 'string' ? c.currency : 'USD';
            return (cur === 'USD' ? '$' : cur + ' ') + money(v) + ' (estimate)';
          }
        }
      }
      return JSON.stringify(c);
    }
    return String(c);
  }

  function money(v) {
    if (v === 0) return '0';
    if (Math.abs(v) >= 1) return v.toFixed(2);
    return v.toPrecision(3);
  }

  function turnCost(turn) {
    var c = costText(turn);
    if (c === undefined && turn.response) c = costText(turn.response);
    return c;
  }

  function costNode(c) {
    if (c === undefined) return unknown('not estimated in this capture');
    if (c === null) return unknown('unknown');
    return c;
  }

  // ------------------------------------------------------------------ data

  function readJson(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent || 'null') : null;
  }

  var DATA = null;
  var BODIES = null;
  var S = {
    sessions: [], byId: new Map(), sessionId: null, rowKey: null,
    q: '', model: '', tool: '', problems: false, changed: false, axis: 'time',
    visible: [], cache: new Map(), first: -1, last: -1, live: null
  };

  function turnTiming(turn) {
    var r = turn.response;
    var start = turn.t;
    var dur = r ? r.duration_ms : null;
    if ((dur === null || dur === undefined) && start !== null && turn.end !== null) dur = turn.end - start;
    var first = r ? (r.ttft_ms !== null && r.ttft_ms !== undefined ? r.ttft_ms : r.ttfb_ms) : null;
    return { start: start, dur: dur === undefined ? null : dur, first: first === undefined ? null : first };
  }

  function isError(turn) {
    var r = turn.response;
    return turn.error_events.length > 0 || (r !== null && r.status !== null && r.status >= 400);
  }

  function prepare(data) {
    var out = [];
    data.sessions.forEach(function (s) {
      var rows = [];
      s.turns.forEach(function (t) {
        rows.push({ kind: 'turn', key: 't' + t.number, t: t.t, turn: t, order: rows.length });
      });
      s.refusals.forEach(function (e, i) {
        rows.push({ kind: 'refusal', key: 'r' + i, t: e.t, ev: e, order: rows.length });
      });
      s.errors.forEach(function (e, i) {
        rows.push({ kind: 'error', key: 'e' + i, t: e.t, ev: e, order: rows.length });
      });
      rows.sort(function (a, b) {
        var an = a.t === null, bn = b.t === null;
        if (an !== bn) return an ? 1 : -1;
        return (an ? 0 : a.t - b.t) || a.order - b.order;
      });
      var byKey = new Map();
      var byIndex = new Map();
      var maxDur = 1;
      rows.forEach(function (r) {
        byKey.set(r.key, r);
        if (r.kind === 'turn') {
          var t = r.turn, rec = t.record, resp = t.response;
          byIndex.set(t.index, r);
          r.timing = turnTiming(t);
          if (r.timing.dur !== null && r.timing.dur > maxDur) maxDur = r.timing.dur;
          r.models = [rec.model];
          if (resp && resp.model && resp.model !== rec.model) r.models.push(resp.model);
          r.advertised = new Set(rec.tool_names || []);
          r.called = t.invocations.map(function (inv) { return inv.name || '(no name)'; });
          r.calledSet = new Set(r.called);
          r.inFlight = inFlight(s, t);
          r.awaiting = awaitingResults(s, t);
          r.problem = !r.inFlight && (t.errors.length > 0 || (!t.evidence_complete && !r.awaiting));
          r.error = isError(t);
          r.text = [s.id, rec.model, resp && resp.model, rec.request_id, resp && resp.response_id,
            rec.api, rec.route, rec.transport].concat(Array.from(r.advertised), r.called, t.errors,
            t.changes.map(function (c) { return c.text; })).join('\n').toLowerCase();
        } else {
          var e = r.ev;
          r.models = [];
          r.advertised = new Set();
          r.calledSet = new Set();
          r.problem = true;
          r.text = [s.id, e.rule, e.error, e.message, e.path, e.request_id].join('\n').toLowerCase();
        }
      });
      var start = s.start, stop = s.stop;
      rows.forEach(function (r) {
        if (r.kind === 'turn' && r.timing.start !== null && r.timing.dur !== null) {
          var end = r.timing.start + r.timing.dur;
          if (stop === null || end > stop) stop = end;
        }
      });
      // One model for every turn (the usual case): said once above the labels, not on each row.
      var requested = new Set();
      rows.forEach(function (r) { if (r.kind === 'turn') requested.add(r.turn.record.model); });
      var oneModel = requested.size === 1 ? Array.from(requested)[0] : null;
      rows.forEach(function (r) { r.oneModel = oneModel; });
      out.push({ s: s, rows: rows, byKey: byKey, byIndex: byIndex, t0: start, oneModel: oneModel,
        span: start !== null && stop !== null ? Math.max(stop - start, 1) : 1, maxDur: maxDur });
    });
    return out;
  }

  function matches(r) {
    if (S.model && r.models.indexOf(S.model) < 0) return false;
    if (S.tool && !(S.tool.charAt(0) === 'c' ? r.calledSet : r.advertised).has(S.tool.slice(2))) return false;
    if (S.problems && !r.problem) return false;
    if (S.changed && !(r.kind === 'turn' && r.turn.changes.length > 0)) return false;
    if (S.q) {
      var words = S.q.toLowerCase().split(/\s+/).filter(Boolean);
      for (var i = 0; i < words.length; i++) if (r.text.indexOf(words[i]) < 0) return false;
    }
    return true;
  }

  function filtering() { return !!(S.q || S.model || S.tool || S.problems || S.changed); }

  function current() { return S.byId.get(S.sessionId) || null; }

  // ------------------------------------------------------------------ layout

  var app = document.getElementById('app');
  var el = {};

  function build() {
    clear(app);
    el.top = h('header', { class: 'top' });
    el.side = h('nav', { class: 'side', 'aria-label': 'sessions' });
    el.main = h('main', { class: 'main' });
    el.detail = h('aside', { class: 'detail', 'aria-label': 'the session or the selected turn', id: 'detail' });
    add(app, [el.top, el.side, el.main, el.detail]);

    el.q = h('input', { type: 'search', id: 'q', placeholder: 'search: model, tool, session, request id, error  ( / )',
      'aria-label': 'search', oninput: function () { S.q = el.q.value.trim(); refilter(); } });
    el.model = h('select', { id: 'filter-model', 'aria-label': 'model',
      onchange: function () { S.model = el.model.value; refilter(); } });
    el.tool = h('select', { id: 'filter-tool', 'aria-label': 'tool',
      onchange: function () { S.tool = el.tool.value; refilter(); } });
    el.problems = h('input', { type: 'checkbox', id: 'filter-problems',
      onchange: function () { S.problems = el.problems.checked; refilter(); } });
    el.changed = h('input', { type: 'checkbox', id: 'filter-changed',
      onchange: function () { S.changed = el.changed.checked; refilter(); } });
    el.count = h('div', { class: 'count', id: 'match-count' });
    el.sessions = h('ul', { class: 'sessions', id: 'sessions' });
    add(el.side, [
      h('div', { class: 'filters' }, el.q, el.model, el.tool,
        h('label', null, el.problems, 'problems only (errors, refusals, incomplete)'),
        h('label', null, el.changed, 'turns whose request changed'),
        el.count),
      el.sessions
    ]);

    el.shead = h('section', { class: 'shead', id: 'session-head' });
    el.axisBtn = h('button', { type: 'button', id: 'axis-toggle', onclick: function () {
      S.axis = S.axis === 'time' ? 'turn' : 'time'; drawTimeline(true);
    } });
    el.tlbar = h('div', { class: 'tlbar' }, el.axisBtn,
      h('span', null, h('span', { class: 'kbd', text: 'j' }), ' ', h('span', { class: 'kbd', text: 'k' }), ' move'),
      h('span', { class: 'legend' },
        h('span', null, h('span', { class: 'sw wait' }), 'waiting for the first chunk (or byte)'),
        h('span', null, h('span', { class: 'sw stream' }), 'model output'),
        h('span', null, h('span', { class: 'sw tool' }), 'tool execution (agent)'),
        h('span', null, h('span', { class: 'sw bad' }), 'error / refused')));
    el.ticks = h('div', { class: 'ticks' });
    el.axisLab = h('div', { class: 'lab', id: 'timeline-labels' });
    el.axis = h('div', { class: 'axis' }, el.axisLab, el.ticks);
    el.rows = h('div', { class: 'rows', id: 'rows' });
    el.tl = h('div', { class: 'tl', id: 'timeline', tabindex: '0', role: 'listbox', 'aria-label': 'timeline' },
      el.axis, el.rows);
    add(el.main, [el.shead, el.tlbar, el.tl]);

    var pending = false;
    el.tl.addEventListener('scroll', function () {
      if (pending) return;
      pending = true;
      requestAnimationFrame(function () { pending = false; drawRows(false); });
    }, { passive: true });
    window.addEventListener('resize', function () { drawTimeline(true); });
    document.addEventListener('keydown', onKey);
  }

  // ------------------------------------------------------------------ top

  function drawTop() {
    var c = DATA.capture;
    var open = DATA.sessions.filter(running);
    // Live, a capture lowered only by turns still in flight is not final, not incomplete.
    var soFar = c.evidence_complete || (open.length > 0 && !c.load_errors.length && DATA.sessions.every(completeSoFar));
    clear(el.top);
    var facts = h('div', { class: 'facts', id: 'capture-facts' },
      h('span', null, h('b', { text: DATA.sessions.length }), ' sessions'),
      h('span', null, h('b', { text: c.turns }), ' turns'),
      c.refusals ? h('span', null, h('b', { text: c.refusals }), ' refused') : null,
      h('span', { 'data-usage': 'input_tokens' }, 'tokens in ', total(c.usage.input_tokens, allTurns(), 'input_tokens')),
      h('span', { 'data-usage': 'output_tokens' }, 'out ', total(c.usage.output_tokens, allTurns(), 'output_tokens')),
      costText(c) !== undefined ? h('span', null, 'cost ', h('b', null, costNode(costText(c)))) : null,
      h('span', { title: 'when this page was made' }, 'generated ', clock(Date.parse(DATA.generated_at)) || DATA.generated_at));
    add(el.top, [
      h('h1', { text: 'modeltap view' }),
      h('span', { class: 'where', title: c.directory, text: DATA.title }),
      !soFar
        ? h('span', { class: 'badge bad', id: 'capture-evidence', text: 'evidence incomplete',
          title: c.capture_errors.join('\n') })
        : open.length
          ? h('span', { class: 'badge warn', id: 'capture-evidence', title: NOT_FINAL.replace('the session is', 'sessions are'),
            text: 'evidence not final: ' + plural(open.length, 'session') + ' running' })
          : h('span', { class: 'badge ok', id: 'capture-evidence', text: 'evidence complete' }),
      facts,
      S.live ? S.live.badge : null
    ]);
    if (DATA.cases) {
      var sum = DATA.cases.summary;
      var worst = sum.failed ? 'bad' : (sum.unavailable ? 'warn' : 'ok');
      add(el.top, h('span', { class: 'badge ' + worst, id: 'cases-summary', title: DATA.cases.file,
        text: 'cases: ' + sum.passed + '/' + sum.cases + ' passed, ' + sum.failed + ' failed, ' + sum.unavailable + ' unavailable' }));
    }
    if (DATA.bodies) {
      add(el.top, h('span', { class: 'badge warn', id: 'content-shown',
        text: 'content shown: bodies from ' + DATA.bodies.recording }));
    }
    if (c.load_errors.length) {
      add(el.top, h('div', { class: 'banner', id: 'load-errors' },
        h('b', { text: plural(c.load_errors.length, 'line') + ' could not be read: ' }),
        c.load_errors.slice(0, 5).join('; '), c.load_errors.length > 5 ? ' …' : ''));
    }
  }

  // ------------------------------------------------------------------ side

  // groups: [[label or null, [[value, text], ...]], ...]
  function options(select, groups, anyText, chosen) {
    clear(select);
    add(select, h('option', { value: '', text: anyText }));
    var found = false;
    groups.forEach(function (g) {
      var parent = g[0] === null ? select : h('optgroup', { label: g[0] });
      g[1].forEach(function (o) {
        found = found || o[0] === chosen;
        add(parent, h('option', { value: o[0], text: o[1] }));
      });
      if (parent !== select && g[1].length) add(select, parent);
    });
    select.value = found ? chosen : '';
  }

  function pairs(values, prefix) { return values.map(function (v) { return [prefix + v, v]; }); }

  function sessionStatus(s) {
    if (s.stop_reason) {
      var ok = s.stop_reason === 'completed';
      return h('span', { class: 'badge ' + (ok ? 'ok' : 'bad'), 'data-role': 'stop-reason', text: s.stop_reason });
    }
    return h('span', { class: 'badge', 'data-role': 'stop-reason', title: 'no sessions.jsonl line: the session has not ended, or the proxy was killed',
      text: S.live ? 'running' : 'not ended' });
  }

  // The live page sees a session without a sessions.jsonl line as running: what it
  // shows is complete so far, not final (the next exchange may yet lack its answer).
  function running(s) { return S.live !== null && !s.stop_reason; }

  var IN_FLIGHT = 'in flight: the answer is still coming (its event is written when the response ends)';

  // A turn of a running session whose answer has not been written yet is in flight:
  // its evidence is not in yet, which is not the same as incomplete.
  function inFlight(s, t) { return running(s) && t.response === null && t.error_events.length === 0; }

  // Whether the session's evidence is complete as far as it goes: complete, or
  // lowered only by turns still in flight ("[turn N] ..." reasons of those turns).
  // A turn of a running session whose tool calls have no result yet: the agent may
  // still be running them (the capture says "tool call NAME (ID) got no result in a
  // later request", and that is all it says against the turn).
  var AWAITING = 'not final: no result for some tool call yet; the session is still running, ' +
    'and a later request may carry it';

  function awaitingResults(s, t) {
    return running(s) && !inFlight(s, t) && t.capture_errors.length > 0 &&
      t.invocations.some(function (inv) { return !inv.answered; }) &&
      t.capture_errors.every(function (e) { return e.indexOf('tool call ') === 0; });
  }

  // Whether the session's evidence is complete as far as it goes: complete, or
  // lowered only by what a running session has not seen yet (answers still
  // streaming, tool results not sent yet: those turns' "[turn N] ..." reasons).
  function completeSoFar(s) {
    if (s.evidence_complete) return true;
    if (!running(s)) return false;
    var pending = [];
    s.turns.forEach(function (t) {
      if (inFlight(s, t)) pending.push('[turn ' + t.number + '] ');
      else if (awaitingResults(s, t)) pending.push('[turn ' + t.number + '] tool call ');
    });
    return pending.length > 0 && s.capture_errors.every(function (e) {
      return pending.some(function (p) { return e.indexOf(p) === 0; });
    });
  }

  var NOT_FINAL = 'complete so far, not final: the session is still running (final once it ends: ' +
    'POST /sessions/ID/end, or the proxy stops)';

  function evidenceBadge(ok, reasons, isRunning) {
    if (!ok) return h('span', { class: 'badge bad', 'data-role': 'evidence', text: 'evidence incomplete', title: reasons.join('\n') });
    return isRunning ? h('span', { class: 'badge warn', 'data-role': 'evidence', text: 'evidence not final', title: NOT_FINAL })
      : h('span', { class: 'badge ok', 'data-role': 'evidence', text: 'evidence complete' });
  }

  function drawSide() {
    options(el.model, [[null, pairs(DATA.capture.models, '')]], 'any model', S.model);
    options(el.tool, [['called', pairs(DATA.capture.tools_called, 'c:')],
      ['advertised', pairs(DATA.capture.tools_advertised, 'a:')]], 'any tool', S.tool);
    S.model = el.model.value;
    S.tool = el.tool.value;
    drawSessionList();
  }

  function drawSessionList() {
    clear(el.sessions);
    var total = 0, shown = 0, sessionsShown = 0;
    S.sessions.forEach(function (x) {
      var n = 0;
      x.rows.forEach(function (r) { if (matches(r)) n++; });
      total += x.rows.length;
      shown += n;
      x.matching = n;
      if (filtering() && n === 0 && x.s.id !== S.sessionId) return;
      sessionsShown++;
      var s = x.s;
      var li = h('li', { class: s.id === S.sessionId ? 'sel' : '', 'data-session': s.id, role: 'option',
        'aria-selected': s.id === S.sessionId ? 'true' : 'false',
        onclick: function () { selectSession(s.id, null); } },
        h('div', { class: 'sid', text: s.id }),
        h('div', { class: 'meta' }, sessionStatus(s), evidenceBadge(completeSoFar(s), s.capture_errors, running(s)),
          h('span', { 'data-role': 'turns', text: filtering() ? n + ' of ' + plural(s.turns.length, 'turn') : plural(s.turns.length, 'turn') }),
          s.refusals.length ? h('span', { class: 'badge bad', text: s.refusals.length + ' refused' }) : null),
        h('div', { class: 'meta' }, s.models.join(', ')));
      add(el.sessions, li);
    });
    if (!sessionsShown) add(el.sessions, h('li', { class: 'empty', text: 'no session matches' }));
    el.count.textContent = filtering() ? shown + ' of ' + plural(total, 'row') + ' match' : plural(total, 'row') + ' (turns, refusals, errors)';
  }

  // ------------------------------------------------------------------ session head

  function coverage(cov, id) {
    var chips = h('div', { class: 'cov', id: id ? id + '-channels' : null });
    var reasons = h('ul', { class: 'reasons', id: id ? id + '-reasons' : null });
    CHANNELS.forEach(function (name) {
      var ch = cov[name];
      add(chips, h('span', { 'data-channel': name, 'data-status': ch.status, 'data-evidence': EVIDENCE[name] ? 'true' : 'false',
        title: ch.reasons.join('\n') || 'complete', text: name + ': ' + ch.status }));
      ch.reasons.forEach(function (reason) {
        var li = h('li', { 'data-channel': name, title: 'click to show it all' },
          h('span', { class: 'ch', text: name }), ' ', reason);
        li.addEventListener('click', function () { li.classList.toggle('open'); });
        add(reasons, li);
      });
    });
    if (!reasons.childNodes.length) return [chips];
    // Long reasons (a channel lowered in hundreds of turns) fold away, so the
    // timeline keeps the screen.
    var length = reasons.textContent.length;
    return [chips, h('details', { class: 'why', open: length < 400 },
      h('summary', { text: plural(reasons.childNodes.length, 'reason') + ' (why a channel is not complete)' }), reasons)];
  }

  function drawHead() {
    clear(el.shead);
    var x = current();
    if (!x) {
      add(el.shead, h('div', { class: 'empty', text: DATA.sessions.length ? 'choose a session' : 'this capture holds no session' }));
      return;
    }
    var s = x.s;
    var calls = 0;
    s.turns.forEach(function (t) { calls += t.invocations.length; });
    add(el.shead, [
      h('h2', { id: 'session-id', text: s.id }),
      h('div', { class: 'line' }, sessionStatus(s), evidenceBadge(completeSoFar(s), s.capture_errors, running(s)),
        h('span', null, h('b', { text: s.turns.length }), ' turns'),
        h('span', null, h('b', { text: calls }), ' tool calls'),
        s.refusals.length ? h('span', null, h('b', { text: s.refusals.length }), ' refused') : null,
        s.errors.length ? h('span', null, h('b', { text: s.errors.length }), ' errors outside turns') : null,
        s.unaudited.length ? h('span', null, h('b', { text: s.unaudited.length }), ' unaudited') : null,
        h('span', { title: 'first to last thing seen' }, 'started ', clock(s.start) || unknown(), ' · span ', ms(s.stop !== null && s.start !== null ? s.stop - s.start : null)),
        h('span', null, 'model time ', h('b', null, ms(s.execution_time_ms)))),
      casesNode(s),
      h('div', { class: 'line', id: 'session-usage' },
        USAGE.map(function (u) { return h('span', { 'data-usage': u[0] }, u[1] + ' ', total(s.usage[u[0]], s.turns, u[0])); }),
        costText(s) !== undefined ? h('span', { 'data-role': 'cost' }, 'cost ', h('b', null, costNode(costText(s)))) : null),
      h('div', { class: 'line' }, 'run ', s.run_ids.join(', ')),
      coverage(s.coverage, 'session-coverage')
    ]);
  }

  // ------------------------------------------------------------------ cases (--expect)

  var MARK = { passed: 'PASS', failed: 'FAIL', unavailable: 'UNAVAILABLE' };

  // The cases of `modeltap view --expect` that judge this session: those naming
  // it, and those over the whole capture.
  function casesNode(s) {
    if (!DATA.cases) return null;
    var mine = DATA.cases.cases.filter(function (c) { return c.session === s.id || c.session === null; });
    var box = h('section', { class: 'cases', id: 'session-cases' },
      h('h3', { text: plural(mine.length, 'case') + ' (' + DATA.cases.file + ')' }));
    if (!mine.length) add(box, h('div', { class: 'empty', text: 'no case names this session' }));
    mine.forEach(function (c) {
      var left = c.verdicts.filter(function (v) { return v.status !== 'passed'; });
      var item = h('details', { class: 'case', 'data-status': c.status, open: c.status !== 'passed' },
        h('summary', null,
          h('span', { class: 'vmark', 'data-status': c.status, text: '[' + MARK[c.status] + ']' }), ' ',
          h('b', { text: c.name }),
          c.session === null ? h('span', { class: 'scope', text: ' (whole capture)' }) : null,
          ' · ' + plural(c.verdicts.length, 'verdict') + (left.length ? ', ' + left.length + ' did not pass' : '')));
      var list = h('ul', { class: 'verdicts' });
      c.verdicts.forEach(function (v) {
        add(list, h('li', { 'data-status': v.status, 'data-optional': v.optional ? 'true' : 'false' },
          h('span', { class: 'vmark', 'data-status': v.status, text: v.status + (v.optional ? ' (optional)' : '') }), ' ',
          h('code', { text: v.name }), ': ', v.reason || '',
          v.hint && v.status === 'unavailable' ? h('div', { class: 'hint', text: 'available with ' + v.hint }) : null));
      });
      add(item, list);
      add(box, item);
    });
    return box;
  }

  // ------------------------------------------------------------------ timeline

  function niceStep(span, n) {
    var raw = span / n;
    var pow = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * pow >= raw) return steps[i] * pow;
    return 10 * pow;
  }

  // ------------------------------------------------------------------ label column

  // The label column is as wide as the session's widest label (turn, badges, model,
  // tools called, duration), so a tool name is not cut to "get_weat…", and at most
  // half the timeline, so the bars keep the other half. Past that the model name
  // gives way first, then the tools (both keep their full text as a title).
  var LAB_MIN = 240;
  var measure = null;

  function measurer() {
    if (measure) return measure;
    var probe = h('div', { class: 'row', 'aria-hidden': 'true' });
    var retry = h('div', { class: 'row retry', 'aria-hidden': 'true' });
    var classes = ['idx', 'badge', 'model', 'tools', 'dur'];
    var spans = classes.map(function (c) { return h('span', { class: c, text: 'x' }); });
    var gl = h('span', { class: 'gl', text: 'x' });
    var tick = h('div', { class: 'tick', text: 'x' });
    add(probe, [h('div', { class: 'lab' }, spans), h('div', { class: 'lane' }, h('div', { class: 'gap' }, gl)),
      h('div', { class: 'axis' }, h('div', { class: 'ticks' }, tick))]);
    spans.push(gl, tick);
    classes.push('gl', 'tick');
    add(retry, h('div', { class: 'lab' }));
    probe.style.visibility = retry.style.visibility = 'hidden';
    add(el.rows, [probe, retry]);
    var px = function (v) { return parseFloat(v) || 0; };
    var lab = getComputedStyle(probe.firstChild);
    var fonts = {}, extra = {}, least = {};
    spans.forEach(function (sp, i) {
      var cs = getComputedStyle(sp);
      fonts[classes[i]] = [cs.fontStyle, cs.fontWeight, cs.fontSize, cs.fontFamily].join(' ');
      extra[classes[i]] = px(cs.paddingLeft) + px(cs.paddingRight) + px(cs.borderLeftWidth) + px(cs.borderRightWidth);
      least[classes[i]] = px(cs.minWidth);
    });
    measure = {
      ctx: document.createElement('canvas').getContext('2d'), widths: new Map(),
      fonts: fonts, extra: extra, least: least, gap: px(lab.columnGap),
      pad: px(lab.paddingLeft) + px(lab.paddingRight),
      retryPad: px(getComputedStyle(retry.firstChild).paddingLeft) - px(lab.paddingLeft)
    };
    probe.remove();
    retry.remove();
    return measure;
  }

  function textWidth(m, kind, text) {
    var key = kind + '\u0000' + text;
    var w = m.widths.get(key);
    if (w === undefined) {
      m.ctx.font = m.fonts[kind];
      w = Math.ceil(m.ctx.measureText(text).width) + 1;
      m.widths.set(key, w);
    }
    return w;
  }

  function labelWidth(x) {
    if (x.labNatural !== undefined) return x.labNatural;
    var m = measurer();
    var most = 0;
    x.rows.forEach(function (r) {
      var items = labelItems(r);
      var w = m.pad + m.gap * (items.length - 1) + (r.kind === 'turn' && r.turn.retry_of !== null ? m.retryPad : 0);
      items.forEach(function (it) {
        var kind = it[0].split(' ')[0];
        w += Math.max(m.least[kind] || 0, textWidth(m, kind, it[1]) + m.extra[kind]);
      });
      if (w > most) most = w;
    });
    x.labNatural = Math.ceil(most);
    return x.labNatural;
  }

  function fitLabels(x) {
    var width = el.tl.clientWidth || 800;
    var most = Math.max(180, Math.floor(width / 2));
    var lab = Math.max(Math.min(LAB_MIN, most), Math.min(most, x ? labelWidth(x) : LAB_MIN));
    el.tl.style.setProperty('--lab', lab + 'px');
    return width - lab - 14;  // the lanes' width (.row .lane's margin-right)
  }

  function drawAxis(x) {
    clear(el.ticks);
    var span = S.axis === 'time' ? x.span : x.maxDur;
    var room = el.ticks.clientWidth || 300;
    // A tick label needs about 60 px; one that would run past the right end hangs
    // left of its line, so nothing runs past the timeline (no sideways scrolling).
    var step = niceStep(span, Math.max(2, Math.min(8, Math.floor(room / 60))));
    var m = measurer(), reach = 0;
    for (var v = 0; v <= span + 1e-9; v += step) {
      var text = tickText(v, step), at = v / span * room, w = textWidth(m, 'tick', text) + m.extra.tick;
      var end = at + w > room;
      // A label that would run into the one before it is left out (its line stays).
      var fits = end ? at - w > reach + 6 : true;
      var t = h('div', { class: 'tick' + (end ? ' end' : ''), text: fits ? text : '', title: text });
      t.style.left = (v / span * 100) + '%';
      add(el.ticks, t);
      reach = end ? at : at + w;
    }
  }

  function pct(v, span) { return Math.max(0, Math.min(100, v / span * 100)) + '%'; }

  function seg(cls, left, width, span, title) {
    var e = h('div', { class: 'seg ' + cls, title: title });
    e.style.left = pct(left, span);
    e.style.width = pct(width, span);
    return e;
  }

  // What a row's label says, as [class, text, title] items: drawn by rowEl and
  // measured by labelWidth, so the label column fits what it holds.
  function labelItems(r) {
    if (r.kind !== 'turn') {
      var e = r.ev, isRef = r.kind === 'refusal';
      return [['idx', isRef ? 'refused' : 'error'], ['model', isRef ? e.rule : e.error, isRef ? e.rule : e.error],
        ['tools', e.path || '', e.path || null]];
    }
    var t = r.turn, called = r.called.join(', ');
    return [
      ['idx', 'turn ' + t.number],
      t.retry_of !== null ? ['badge retry', 'retry', 'retry of turn ' + turnNo(t.retry_of)] : null,
      t.attempts > 1 ? ['badge retry', '×' + t.attempts, t.attempts + ' attempts'] : null,
      t.changes.length ? ['badge change', 'Δ', t.changes.map(function (c) { return c.text; }).join('\n')] : null,
      r.error ? ['badge bad', t.response && t.response.status >= 400 ? String(t.response.status) : 'error'] : null,
      r.inFlight ? ['badge', 'in flight', IN_FLIGHT] : null,
      !r.error && !r.inFlight && !r.awaiting && !t.evidence_complete ? ['badge warn', 'incomplete'] : null,
      r.oneModel === null ? ['model', t.record.model, t.record.model] : null,
      r.called.length ? ['tools', '→ ' + called, 'tools called: ' + called] : null,
      ['dur', msText(r.timing.dur) || '?']
    ].filter(Boolean);
  }

  function rowEl(x, r, i) {
    var sel = r.key === S.rowKey;
    var cls = 'row ' + r.kind + (sel ? ' sel' : '');
    var lab = h('div', { class: 'lab' }, labelItems(r).map(function (it) {
      return h('span', { class: it[0], text: it[1], title: it[2] || null });
    }));
    var lane = h('div', { class: 'lane' });
    var title;
    if (r.kind === 'turn') {
      var t = r.turn, tm = r.timing;
      if (t.retry_of !== null) cls += ' retry';
      title = 'turn ' + t.number + ' · ' + t.record.model + '\nfirst chunk ' + (msText(tm.first) || 'unknown') +
        ' · duration ' + (msText(tm.dur) || 'unknown');
      var span = S.axis === 'time' ? x.span : x.maxDur;
      var left = S.axis === 'time' ? (tm.start !== null && x.t0 !== null ? tm.start - x.t0 : 0) : 0;
      if (tm.dur === null) {
        add(lane, seg('open' + (r.error ? ' bad' : ''), left, span / 50, span, 'no response recorded'));
      } else if (r.error) {
        add(lane, seg('whole bad', left, tm.dur, span, title));
      } else if (tm.first !== null && tm.first < tm.dur) {
        add(lane, seg('wait', left, tm.first, span, 'waiting ' + msText(tm.first)));
        add(lane, seg('stream', left + tm.first, tm.dur - tm.first, span, 'output ' + msText(tm.dur - tm.first)));
      } else {
        add(lane, seg('whole', left, tm.dur, span, title));
      }
      if (S.axis === 'time' && tm.start !== null && x.t0 !== null) toolGaps(x, r, lane, span);
    } else {
      var e = r.ev;
      var isRef = r.kind === 'refusal';
      title = (isRef ? 'refused (' + e.rule + '): ' : e.error + ': ') + e.message;
      if (S.axis === 'time' && r.t !== null && x.t0 !== null) {
        var m = h('div', { class: 'mark ' + (isRef ? 'refused' : 'error'), title: title });
        m.style.left = pct(r.t - x.t0, x.span);
        add(lane, m);
      }
    }
    var row = h('div', { class: cls, 'data-key': r.key, role: 'option', 'aria-selected': sel ? 'true' : 'false', title: title,
      onclick: function () { selectRow(r.key, false); } }, lab, lane);
    row.style.top = (i * ROW_H) + 'px';
    return row;
  }

  // The agent's own time: from the end of the response that asked for tools to the
  // request that carried their results back.
  // MCP executions (SPEC 3b): what ran each call, drawn under the model's turn.
  function execText(ex) {
    var said = { result: 'ok', tool_error: 'isError', error: 'JSON-RPC error ' + ex.error_code, http_error: 'HTTP ' + ex.http_status }[ex.outcome];
    return 'MCP ' + ex.tool + ' on ' + ex.server + ': ' + (ex.outcome === null ? 'no answer seen' : said) +
      (ex.duration_ms === null ? '' : ' · ' + msText(ex.duration_ms));
  }

  function mcpExecutions(x, t, lane, span) {
    t.invocations.forEach(function (inv) {
      var ex = inv.execution;
      if (!ex || ex.t === null) return;
      var b = h('div', { class: 'gap', 'data-role': 'mcp-execution', title: execText(ex) });
      b.style.left = pct(ex.t - x.t0, span);
      b.style.width = pct(Math.max(ex.duration_ms || 0, 0), span);
      b.style.top = '18px';
      b.style.borderTopStyle = 'solid';
      if (ex.failed !== false) b.style.borderTopColor = ex.failed ? 'var(--bad)' : 'var(--muted)';
      add(lane, b);
    });
  }

  function toolGaps(x, r, lane, span) {
    var t = r.turn, tm = r.timing;
    mcpExecutions(x, t, lane, span);
    var end = t.end !== null ? t.end : (tm.dur !== null ? tm.start + tm.dur : null);
    if (end === null) return;
    var by = new Map();
    t.invocations.forEach(function (inv) {
      if (inv.result_turn_index === null) return;
      var list = by.get(inv.result_turn_index) || [];
      list.push(inv.name || '(no name)');
      by.set(inv.result_turn_index, list);
    });
    by.forEach(function (names, idx) {
      var target = x.byIndex.get(idx);
      if (!target || target.t === null) return;
      var took = msText(target.t - end), said = names.join(', ') + ' ' + took;
      // The row's label names the tools already: where the names do not fit, the time alone.
      var room = S.lane * (1 - Math.max(0, end - x.t0) / span) - 6;
      var m = measurer();
      var gl = h('span', { class: 'gl', text: textWidth(m, 'gl', said) <= room ? said : (textWidth(m, 'gl', took) <= room ? took : '') });
      var g = h('div', { class: 'gap', title: 'tool execution: ' + names.join(', ') + ' · ' + msText(target.t - end) }, gl);
      g.style.left = pct(end - x.t0, span);
      g.style.width = pct(Math.max(target.t - end, 0), span);
      // The label may run past its gap, never past the lane (it ends in "…", the title has it all).
      var from = parseFloat(g.style.left), wide = Math.max(parseFloat(g.style.width), 0.01);
      gl.style.maxWidth = 'calc(' + ((100 - from) / wide * 100) + '% - 6px)';
      add(lane, g);
    });
  }

  function drawTimeline(force) {
    var x = current();
    el.axisBtn.textContent = S.axis === 'time' ? 'axis: session time' : 'axis: per turn';
    el.axisBtn.title = S.axis === 'time' ? 'bars placed in session time; click to compare durations side by side'
      : 'every bar starts at 0; click to place bars in session time';
    S.visible = x ? x.rows.filter(matches) : [];
    el.rows.style.height = (S.visible.length * ROW_H) + 'px';
    el.axisLab.textContent = x && x.oneModel !== null ? 'turn · ' + x.oneModel + ' · tools called' : 'turn · model · tools called';
    el.axisLab.title = x && x.oneModel !== null ? 'every turn of this session asked for ' + x.oneModel : '';
    S.lane = fitLabels(x);
    if (x) drawAxis(x); else clear(el.ticks);
    drawRows(true);
    if (x && !S.visible.length) {
      var empty = h('div', { class: 'empty', text: x.rows.length ? 'no turn of this session matches the filter' : 'no turns in this session' });
      empty.style.top = '0px';
      add(el.rows, empty);
    }
  }

  function drawRows(force) {
    var x = current();
    if (!x) { clear(el.rows); S.cache = new Map(); return; }
    var top = Math.max(0, el.tl.scrollTop - AXIS_H);
    var height = el.tl.clientHeight || 600;
    var first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
    var last = Math.min(S.visible.length, Math.ceil((top + height) / ROW_H) + OVERSCAN);
    if (!force && first === S.first && last === S.last) return;
    if (force) { clear(el.rows); S.cache = new Map(); }
    var keep = new Map();
    for (var i = first; i < last; i++) {
      var r = S.visible[i];
      var row = S.cache.get(r.key);
      if (!row) { row = rowEl(x, r, i); el.rows.appendChild(row); }
      keep.set(r.key, row);
    }
    S.cache.forEach(function (row, key) { if (!keep.has(key)) row.remove(); });
    S.cache = keep;
    S.first = first;
    S.last = last;
  }

  function scrollToRow(key) {
    var i = -1;
    for (var j = 0; j < S.visible.length; j++) if (S.visible[j].key === key) { i = j; break; }
    if (i < 0) return;
    var top = i * ROW_H, view = el.tl.clientHeight - AXIS_H;
    if (top < el.tl.scrollTop) el.tl.scrollTop = top;
    else if (top + ROW_H > el.tl.scrollTop + view) el.tl.scrollTop = top + ROW_H - view;
    drawRows(false);
  }

  // ------------------------------------------------------------------ detail

  function section(title, id) {
    return [h('h4', { text: title }), h('div', { id: id })];
  }

  function facts(pairs) {
    var dl = h('dl', { class: 'facts' });
    pairs.forEach(function (p) {
      if (!p) return;
      add(dl, [h('dt', { text: p[0] }), h('dd', { 'data-field': p[2] || p[0] }, p[1])]);
    });
    return dl;
  }

  function tags(list, none) {
    if (list === null || list === undefined) return unknown(none || 'not stated');
    if (!list.length) return unknown('none');
    return h('div', { class: 'taglist' }, list.map(function (v) { return h('span', { text: v }); }));
  }

  function pretty(text) {
    if (typeof text !== 'string') return text;
    var s = text.trim();
    if (s[0] === '{' || s[0] === '[') {
      try { return JSON.stringify(JSON.parse(s), null, 2); } catch (e) { return text; }
    }
    return text;
  }

  var KNOWN_RECORD = ['request_id', 'model', 'tool_names', 'reasoning_effort', 'thinking', 'image_details',
    'image_count', 'instructions_sha256', 'seq', 'run_id', 'session_id', 'ts', 'transport', 'api', 'route',
    'upstream', 'path', 'stream', 'hosted_tools', 'tool_results', 'previous_response_id', 'generate',
    'omitted_settings', 'body_bytes', 'body_sha256'];
  var KNOWN_RESPONSE = ['kind', 'ts', 'run_id', 'session_id', 'seq', 'request_id', 'api', 'transport', 'status',
    'stream', 'response_id', 'model', 'usage', 'finish_reasons', 'tool_calls', 'response_status', 'ttfb_ms',
    'ttft_ms', 'duration_ms', 'evidence_complete', 'capture_errors', 'cost'];

  function extra(obj, known) {
    return Object.keys(obj).filter(function (k) { return known.indexOf(k) < 0; }).map(function (k) {
      return [k, value(obj[k]), k];
    });
  }

  function drawDetail() {
    clear(el.detail);
    var x = current();
    var r = x && S.rowKey ? x.byKey.get(S.rowKey) : null;
    if (!r) {
      if (x) drawSessionSummary(x);
      add(el.detail, h('div', { class: 'hint' }, 'Select a turn in the timeline (click, or ',
        h('span', { class: 'kbd', text: 'j' }), ' / ', h('span', { class: 'kbd', text: 'k' }),
        ') to see its audit facts, what changed, tool calls and usage', x ? '; ' : '.',
        x ? [h('span', { class: 'kbd', text: 'Esc' }), ' comes back here.'] : null));
      return;
    }
    if (r.kind === 'refusal') return drawRefusal(r.ev);
    if (r.kind === 'error') return drawLooseError(r.ev);
    drawTurn(x, r);
  }

  // The session, until a turn is chosen: what it did (turns, models, time, tokens),
  // the tools it called and how long the agent took to run them, and its problems,
  // each a link to its row.
  function drawSessionSummary(x) {
    var s = x.s;
    var calls = 0, retries = 0;
    var tools = new Map();
    s.turns.forEach(function (t) {
      if (t.retry_of !== null) retries++;
      t.invocations.forEach(function (inv) {
        calls++;
        var name = inv.name || '(no name)';
        var tool = tools.get(name) || { calls: 0, open: 0, times: [] };
        tool.calls++;
        if (!inv.answered) tool.open++;
        if (inv.duration_ms !== null && inv.duration_ms !== undefined) tool.times.push(inv.duration_ms);
        tools.set(name, tool);
      });
    });
    add(el.detail, [
      h('h3', { id: 'detail-title', text: 'Session ' + s.id }),
      h('div', { class: 'sub' }, sessionStatus(s), evidenceBadge(completeSoFar(s), s.capture_errors, running(s)),
        h('span', { text: clock(s.start) || '' })),
      h('h4', { text: 'Session' }),
      h('div', { id: 'session-summary' }, facts([
        ['turns', String(s.turns.length) + (retries ? ' (' + plural(retries, 'retry', 'retries') + ')' : ''), 'turns'],
        ['models', s.models.length ? s.models.join(', ') : unknown('none'), 'models'],
        ['span', ms(s.stop !== null && s.start !== null ? s.stop - s.start : null), 'span'],
        ['model time', ms(s.execution_time_ms), 'execution_time_ms'],
        ['tokens in', total(s.usage.input_tokens, s.turns, 'input_tokens'), 'input_tokens'],
        ['tokens out', total(s.usage.output_tokens, s.turns, 'output_tokens'), 'output_tokens'],
        costText(s) !== undefined ? ['cost', costNode(costText(s)), 'cost'] : null,
        ['tool calls', String(calls), 'tool_calls']
      ]))
    ]);
    if (tools.size) {
      add(el.detail, h('h4', { text: 'Tools called' }));
      add(el.detail, h('table', { class: 'usage tools', id: 'session-tools' },
        h('tr', null, h('th', { text: 'tool' }), h('th', { text: 'calls' }), h('th', { text: 'agent time' })),
        Array.from(tools.keys()).sort().map(function (name) {
          var tool = tools.get(name);
          var lo = Math.min.apply(null, tool.times), hi = Math.max.apply(null, tool.times);
          var time = !tool.times.length ? unknown() : lo === hi ? msText(lo) : msText(lo) + ' to ' + msText(hi);
          return h('tr', { 'data-tool': name },
            h('td', { class: 'name', text: name }),
            h('td', null, String(tool.calls), tool.open ? h('span', { class: 'errs', text: ' (' + tool.open + ' without a result)' }) : null),
            h('td', null, time));
        })));
    }
    var problems = x.rows.filter(function (r) { return r.problem; });
    if (problems.length) {
      add(el.detail, h('h4', { text: 'Problems (' + problems.length + ')' }));
      add(el.detail, h('ul', { class: 'errs', id: 'session-problems' }, problems.slice(0, 20).map(function (r) {
        var what = r.kind === 'turn' ? 'turn ' + r.turn.number + ': ' + (r.turn.errors[0] || 'evidence incomplete')
          : (r.kind === 'refusal' ? 'refused: ' + r.ev.rule : 'error: ' + r.ev.error);
        return h('li', { class: 'link', 'data-key': r.key, text: what, onclick: function () { selectRow(r.key, true); } });
      }), problems.length > 20 ? h('li', { text: (problems.length - 20) + ' more: tick "problems only"' }) : null));
    }
  }

  function drawRefusal(e) {
    add(el.detail, [
      h('h3', { id: 'detail-title', text: 'Refused: ' + e.rule }),
      h('div', { class: 'sub' }, h('span', { text: clock(e.t) || e.ts }), h('span', { class: 'badge bad', text: 'not forwarded' })),
      h('h4', { text: 'Refusal' }),
      facts([['rule', e.rule], ['message', e.message], ['status', value(e.status)], ['transport', e.transport],
        ['method', value(e.method)], ['path', e.path], ['api', value(e.api)], ['request_id', value(e.request_id)],
        ['seq', value(e.seq)], ['run_id', e.run_id]])
    ]);
  }

  function drawLooseError(e) {
    add(el.detail, [
      h('h3', { id: 'detail-title', text: 'Error: ' + e.error }),
      h('div', { class: 'sub' }, h('span', { text: clock(e.t) || e.ts })),
      facts([['error', e.error], ['message', e.message], ['transport', e.transport], ['method', value(e.method)],
        ['path', value(e.path)], ['request_id', value(e.request_id)], ['seq', value(e.seq)], ['run_id', e.run_id]])
    ]);
  }

  function drawTurn(x, r) {
    var t = r.turn, rec = t.record, resp = t.response, tm = r.timing;
    var badges = [];
    if (t.retry_of !== null) badges.push(h('span', { class: 'badge retry', id: 'retry-badge', text: 'retry of turn ' + turnNo(t.retry_of) }));
    if (t.attempts > 1) badges.push(h('span', { class: 'badge retry', id: 'retry-badge', text: t.attempts + ' attempts (retried by the client)' }));
    if (r.error) badges.push(h('span', { class: 'badge bad', text: resp && resp.status >= 400 ? 'HTTP ' + resp.status : 'error' }));
    badges.push(r.inFlight ? h('span', { class: 'badge warn', 'data-role': 'evidence', text: 'in flight', title: IN_FLIGHT })
      : r.awaiting ? h('span', { class: 'badge warn', 'data-role': 'evidence', text: 'evidence not final', title: AWAITING })
      : t.evidence_complete ? h('span', { class: 'badge ok', 'data-role': 'evidence', text: 'evidence complete' })
        : h('span', { class: 'badge bad', 'data-role': 'evidence', text: 'evidence incomplete' }));
    add(el.detail, [
      h('h3', { id: 'detail-title', text: 'Turn ' + t.number + ' · seq ' + rec.seq }),
      h('div', { class: 'sub' }, h('span', { text: clock(t.t) || rec.ts }), h('span', { text: rec.api }),
        h('span', { text: rec.transport }), badges)
    ]);

    // What changed
    var prev = x.byIndex.get(t.index - 1);
    add(el.detail, h('h4', { text: prev ? 'What changed from turn ' + prev.turn.number : 'What changed' }));
    var changes = h('div', { id: 'changes' });
    if (t.retry_of !== null) {
      add(changes, h('p', { class: 'nochange', text: 'A retry: the same request body as turn ' + turnNo(t.retry_of) + ', sent again after that attempt failed.' }));
    }
    if (!prev) add(changes, h('p', { class: 'nochange', text: 'First turn of the session.' }));
    else if (!t.changes.length) add(changes, h('p', { class: 'nochange', text: 'Nothing the audit records changed (model, effort, tools, instructions, images, route).' }));
    else {
      add(changes, h('ul', { class: 'changes' }, t.changes.map(function (c) {
        return h('li', { 'data-what': c.what, 'data-kind': c.kind || 'changed', text: c.text });
      })));
    }
    add(el.detail, changes);

    // Timing
    add(el.detail, h('h4', { text: 'Timing' }));
    var before = null;
    if (prev && prev.turn.end !== null && t.t !== null) before = t.t - prev.turn.end;
    add(el.detail, facts([
      ['time to first byte', ms(resp ? resp.ttfb_ms : null), 'ttfb_ms'],
      ['time to first chunk', ms(resp ? resp.ttft_ms : null), 'ttft_ms'],
      ['duration', ms(resp ? resp.duration_ms : null), 'duration_ms'],
      ['agent time before', before === null ? unknown() : msText(before), 'gap_before_ms']
    ]));

    // Tool calls
    add(el.detail, h('h4', { text: 'Tool calls (' + t.invocations.length + ')' }));
    var callsBox = h('div', { id: 'tool-calls' });
    if (!t.invocations.length) add(callsBox, h('p', { class: 'nochange', text: resp ? 'The model asked for no tool.' : 'No response: tool calls unknown.' }));
    t.invocations.forEach(function (inv) {
      var res;
      if (inv.answered) {
        res = h('div', { class: 'res', 'data-role': 'result' }, 'result sent back in turn ' + turnNo(inv.result_turn_index) +
          ' · ' + (bytesText(inv.result_bytes) || 'size unknown') + ' · after ' + (msText(inv.duration_ms) || 'unknown'));
      } else {
        res = h('div', { class: 'res', 'data-role': 'result' }, r.awaiting ? h('span', { text: 'no result yet (the session is still running)' })
          : h('span', { class: 'errs', text: 'no result came back in a later request' }));
      }
      var ran = inv.execution ? h('div', { class: 'res', 'data-role': 'mcp-execution' },
        inv.execution.failed ? h('span', { class: 'errs', text: execText(inv.execution) }) : execText(inv.execution)) : null;
      add(callsBox, h('div', { class: 'call', 'data-call': inv.call_id || '' },
        h('div', { class: 'ch' }, h('span', { class: 'name', text: inv.name || '(no name)' }),
          h('span', { class: 'cid', text: inv.call_id || 'no call_id' })),
        inv.arguments === null ? h('pre', null, unknown('no arguments seen')) : h('pre', { 'data-role': 'arguments', text: pretty(inv.arguments) }),
        res, ran));
    });
    add(el.detail, callsBox);

    if (rec.tool_results.length) {
      add(el.detail, h('h4', { text: 'Tool results this request carried' }));
      add(el.detail, h('div', { id: 'tool-results' }, facts(rec.tool_results.map(function (tr) {
        return [tr.call_id || '(no call_id)', bytes(tr.bytes), 'result'];
      }))));
    }

    // Usage and cost
    add(el.detail, h('h4', { text: 'Usage' }));
    add(el.detail, h('table', { class: 'usage', id: 'usage' }, USAGE.map(function (u) {
      var summed = u[0] === 'total_tokens' && t.usage.total_summed;
      return h('tr', { 'data-usage': u[0] }, h('td', { text: u[1] }), h('td', null, count(t.usage[u[0]]),
        summed ? h('span', { class: 'unknown', 'data-role': 'summed', text: ' (sum of the reported counts: the provider reports no total)' }) : null));
    }), h('tr', { 'data-usage': 'cost' }, h('td', { text: 'cost' }), h('td', null, costNode(turnCost(t))))));

    // Errors
    if (t.errors.length && !r.inFlight) {
      add(el.detail, h('h4', { text: 'Errors' }));
      add(el.detail, h('ul', { class: 'errs', id: 'errors' }, t.errors.map(function (m) { return h('li', { text: m }); })));
    }

    // Audit record
    add(el.detail, h('h4', { text: 'Audit record' }));
    add(el.detail, h('div', { id: 'audit' }, facts([
      ['model', rec.model],
      ['reasoning effort', rec.reasoning_effort === null ? unknown('not sent') : rec.reasoning_effort, 'reasoning_effort'],
      ['thinking', rec.thinking === null ? unknown('not sent') : JSON.stringify(rec.thinking), 'thinking'],
      ['tools advertised', tags(rec.tool_names, 'not stated (continuation)'), 'tool_names'],
      ['hosted tools', tags(rec.hosted_tools.map(function (ht) { return ht.name ? ht.type + ':' + ht.name : ht.type; })), 'hosted_tools'],
      ['instructions', rec.instructions_sha256 === null ? unknown('not stated (continuation)') : rec.instructions_sha256, 'instructions_sha256'],
      ['images', rec.image_count + (rec.image_count ? ' (detail: ' + rec.image_details.map(function (d) { return d === null ? 'none' : d; }).join(', ') + ')' : ''), 'image_count'],
      ['transport', rec.transport], ['api', rec.api], ['route', value(rec.route)], ['upstream', rec.upstream],
      ['path', rec.path], ['stream', String(rec.stream)],
      ['previous response', value(rec.previous_response_id), 'previous_response_id'],
      ['generate', value(rec.generate)],
      ['not stated', rec.omitted_settings.length ? rec.omitted_settings.join(', ') : unknown('nothing'), 'omitted_settings'],
      ['seq', String(rec.seq)], ['request_id', rec.request_id], ['run_id', rec.run_id],
      ['body', bytesText(rec.body_bytes) + ' · sha256 ' + rec.body_sha256, 'body_sha256']
    ].concat(extra(rec, KNOWN_RECORD)))));

    // Response
    add(el.detail, h('h4', { text: 'Response' }));
    if (!resp && r.inFlight) add(el.detail, h('p', { class: 'note', id: 'response', text: IN_FLIGHT }));
    else if (!resp) add(el.detail, h('p', { class: 'errs', id: 'response', text: 'No response event was recorded for this request.' }));
    else {
      add(el.detail, h('div', { id: 'response' }, facts([
        ['HTTP status', resp.status !== null ? String(resp.status)
          : unknown(resp.transport === 'websocket' ? 'none (a WebSocket message)' : 'no answer'), 'status'],
        ['status', value(resp.response_status), 'response_status'],
        ['response id', value(resp.response_id), 'response_id'],
        ['model', value(resp.model), 'response_model'],
        ['finish reasons', resp.finish_reasons === null ? unknown() : resp.finish_reasons.join(', ') || unknown('none'), 'finish_reasons'],
        ['stream', String(resp.stream)],
        ['seen completely', String(resp.evidence_complete), 'evidence_complete'],
        resp.capture_errors.length ? ['capture errors', resp.capture_errors.join('; '), 'capture_errors'] : null
      ].concat(extra(resp, KNOWN_RESPONSE)))));
    }

    add(el.detail, h('h4', { text: 'Evidence coverage (this turn)' }));
    add(el.detail, h('div', { id: 'turn-coverage' }, coverage(t.coverage, 'turn-coverage')));

    if (DATA.bodies) drawBodies(t);
  }

  // ------------------------------------------------------------------ bodies

  function blob(key) {
    if (BODIES === null) BODIES = readJson('modeltap-bodies') || {};
    return key ? BODIES[key] || null : null;
  }

  function bodyView(b, what) {
    if (!b) return h('p', { class: 'note', text: 'no ' + what + ' body in the recording' });
    var notes = [];
    if (b.note) notes.push(b.note);
    if (b.cut) notes.push('cut: showing the first ' + bytesText(b.shown) + (b.bytes !== null ? ' of ' + bytesText(b.bytes) + ' stored' : ''));
    return [notes.length ? h('p', { class: 'note', text: notes.join(' · ') }) : null,
      h('pre', { class: 'body', 'data-role': what + '-body', text: b.cut ? b.text : pretty(b.text) })];
  }

  function drawBodies(t) {
    add(el.detail, h('h4', { text: 'Content (from the recording)' }));
    var box = h('div', { id: 'bodies' });
    add(el.detail, box);
    var rb = t.bodies;
    if (!rb) {
      add(box, h('p', { class: 'note', text: 'The recording holds no exchange that matches this turn.' }));
      return;
    }
    var out = h('div');
    var buttons = [];
    function button(label, make) {
      var b = h('button', { type: 'button', 'aria-pressed': 'false', onclick: function () {
        var on = b.getAttribute('aria-pressed') !== 'true';
        buttons.forEach(function (o) { o.setAttribute('aria-pressed', 'false'); });
        clear(out);
        if (on) { b.setAttribute('aria-pressed', 'true'); add(out, make()); }
      } }, label);
      buttons.push(b);
      return b;
    }
    var btns = [button('request body', function () { return bodyView(blob(rb.request), 'request'); })];
    if (rb.messages) {
      btns.push(button('WebSocket messages (' + rb.messages.length + ')', function () {
        return rb.messages.map(function (m) {
          var text = m.text !== undefined ? m.text : (blob(m.blob) || { text: '(binary or missing)' }).text;
          return h('div', { class: 'wsmsg' }, h('div', { class: 'from', text: '+' + (msText(m.ms) || '?') + ' ' + m.from }),
            h('pre', { 'data-role': 'ws-message', text: pretty(text) }));
        });
      }));
    } else {
      btns.push(button('response body' + (rb.status !== null ? ' (HTTP ' + rb.status + ')' : ''), function () {
        return [rb.error ? h('p', { class: 'errs', text: rb.error }) : null, bodyView(blob(rb.response), 'response')];
      }));
    }
    add(box, [h('div', { class: 'bodybtns' }, btns), out]);
  }

  // ------------------------------------------------------------------ selection

  function selectSession(id, rowKey) {
    if (id !== S.sessionId) el.tl.scrollTop = 0;
    S.sessionId = id;
    S.rowKey = rowKey;
    drawSessionList();
    drawHead();
    drawTimeline(true);
    if (rowKey) scrollToRow(rowKey);
    drawDetail();
    saveHash();
  }

  function selectRow(key, scroll) {
    S.rowKey = key;
    S.cache.forEach(function (row, k) {
      row.classList.toggle('sel', k === key);
      row.setAttribute('aria-selected', k === key ? 'true' : 'false');
    });
    if (scroll) scrollToRow(key);
    drawDetail();
    saveHash();
  }

  function refilter() {
    drawSessionList();
    if (filtering() && current() && current().matching === 0) {
      var next = S.sessions.find(function (x) { return x.matching > 0; });
      if (next) { selectSession(next.s.id, null); return; }
    }
    drawTimeline(true);
  }

  function onKey(ev) {
    if (ev.target && (ev.target.tagName === 'INPUT' || ev.target.tagName === 'SELECT')) {
      if (ev.key === 'Escape' && ev.target === el.q) { el.q.value = ''; S.q = ''; refilter(); el.q.blur(); }
      return;
    }
    if (ev.key === '/') { ev.preventDefault(); el.q.focus(); return; }
    if (ev.key === 'Escape' && S.rowKey) { selectRow(null, false); return; }
    var step = ev.key === 'j' || ev.key === 'ArrowDown' ? 1 : ev.key === 'k' || ev.key === 'ArrowUp' ? -1 : 0;
    if (!step || !S.visible.length) return;
    ev.preventDefault();
    var i = -1;
    for (var j = 0; j < S.visible.length; j++) if (S.visible[j].key === S.rowKey) { i = j; break; }
    i = Math.max(0, Math.min(S.visible.length - 1, i < 0 ? 0 : i + step));
    selectRow(S.visible[i].key, true);
  }

  function saveHash() {
    var parts = [];
    if (S.sessionId !== null) parts.push('s=' + encodeURIComponent(S.sessionId));
    if (S.rowKey) parts.push('r=' + encodeURIComponent(S.rowKey));
    var url = parts.length ? '#' + parts.join('&') : location.pathname + location.search;
    try { history.replaceState(null, '', url); } catch (e) { /* file: URLs in some browsers */ }
  }

  function readHash() {
    var out = {};
    location.hash.replace(/^#/, '').split('&').forEach(function (p) {
      var i = p.indexOf('=');
      if (i > 0) {
        try { out[p.slice(0, i)] = decodeURIComponent(p.slice(i + 1)); } catch (e) { /* ignore a bad hash */ }
      }
    });
    return out;
  }

  // ------------------------------------------------------------------ live

  function startLive(cfg) {
    S.live = { badge: h('span', { class: 'live', id: 'live', text: 'live' }), etag: null };
    function status(ok, text) {
      S.live.badge.className = 'live ' + (ok ? 'on' : 'off');
      S.live.badge.textContent = text;
    }
    function tick() {
      var headers = {};
      if (S.live.etag) headers['If-None-Match'] = S.live.etag;
      fetch(cfg.data_url, { cache: 'no-store', credentials: 'same-origin', headers: headers }).then(function (res) {
        if (res.status === 304) { status(true, 'live · up to date ' + new Date().toISOString().slice(11, 19) + ' UTC'); return null; }
        if (!res.ok) { status(false, 'live · HTTP ' + res.status); return null; }
        S.live.etag = res.headers.get('ETag');
        return res.json();
      }).then(function (data) {
        if (data) {
          data.live = cfg;
          apply(data);
          status(true, 'live · updated ' + new Date().toISOString().slice(11, 19) + ' UTC');
        }
      }).catch(function () {
        status(false, 'live · disconnected (has the proxy stopped?)');
      }).then(function () { setTimeout(tick, cfg.poll_ms || 1000); });
    }
    setTimeout(tick, cfg.poll_ms || 1000);
  }

  function apply(data) {
    var atBottom = el.tl.scrollTop + el.tl.clientHeight >= el.tl.scrollHeight - ROW_H;
    DATA = data;
    S.sessions = prepare(DATA);
    S.byId = new Map(S.sessions.map(function (x) { return [x.s.id, x]; }));
    if (!S.byId.has(S.sessionId)) S.sessionId = S.sessions.length ? S.sessions[S.sessions.length - 1].s.id : null;
    drawTop();
    drawSide();
    drawHead();
    drawTimeline(true);
    if (atBottom && S.visible.length) { el.tl.scrollTop = el.tl.scrollHeight; drawRows(false); }
    drawDetail();
  }

  // ------------------------------------------------------------------ start

  function start() {
    try {
      DATA = readJson('modeltap-data');
    } catch (e) {
      add(app, h('div', { class: 'empty', text: 'The page data could not be read: ' + e.message }));
      return;
    }
    if (!DATA || DATA.format !== 'modeltap-view/1') {
      add(app, h('div', { class: 'empty', text: 'This page holds no modeltap view data it understands.' }));
      return;
    }
    build();
    if (DATA.live) startLive(DATA.live);
    S.sessions = prepare(DATA);
    S.byId = new Map(S.sessions.map(function (x) { return [x.s.id, x]; }));
    drawTop();
    drawSide();
    var hash = readHash();
    var sid = hash.s !== undefined && S.byId.has(hash.s) ? hash.s : (S.sessions.length ? S.sessions[0].s.id : null);
    var key = hash.r !== undefined && sid !== null && S.byId.get(sid).byKey.has(hash.r) ? hash.r : null;
    selectSession(sid, key);
    document.documentElement.setAttribute('data-ready', 'true');
    if (window.performance && performance.mark) performance.mark('modeltap-ready');
  }

  start();
}());
