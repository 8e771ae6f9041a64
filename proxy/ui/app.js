// The inspector page of reasoning-proxy.
//
// Data comes from three places, all with the caller's Authorization header:
//   GET v1/conversations        the conversation list (sidebar)
//   GET v1/conversations/{id}   stored turns of the selected conversation
//   GET ui/events               the live feed: turn_start, delta, turn_end, deleted
// The live feed is read with fetch() and a stream reader, because
// EventSource cannot send headers. A live turn is drawn from its deltas;
// when it ends, the conversation is fetched again and the stored turn
// replaces the live drawing (the store is the record, the feed a preview).
//
// All text from the proxy goes into the page as text nodes, never as HTML.
'use strict';

(() => {
  const KEY_STORAGE = 'reasoning-proxy.key';
  const THEME_STORAGE = 'reasoning-proxy.theme';
  const PREVIEW_CHARS = 40;
  const NO_ANSWER = 'Model provided reasoning but no response.';
  const MAX_RETRY_MS = 10000;
  const STALE_CHECK_MS = 2000; // how often live turns are looked at for staleness
  const MAX_UNSTORED_TURNS = 100; // finished turns the store did not keep, shown from the feed

  const $ = (id) => document.getElementById(id);
  const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');

  const state = {
    key: readStorage(sessionStorage, KEY_STORAGE),
    scope: null, // 'all' (admin token) or 'tenant', from the feed's hello
    staleAfter: 0, // seconds a live turn may go without an event (the hello says; 0: forever)
    conversations: new Map(), // ref -> conversation entry
    hasMore: false, // the list left older conversations out
    listed: false, // the list was read: only then can it say there are none
    selected: null, // ref of the conversation on screen
    stored: null, // the last GET of the selected conversation
    live: new Map(), // turnId -> live turn
    expanded: new Map(), // `${msgId}#${block}` -> the reader's last choice
    stream: null, // AbortController of the feed request
    retry: 0,
    generation: 0, // bumped when the key changes: older responses are dropped
    eventSeq: 0, // counts feed events, to know what a fetch already includes
    loadSeq: 0,
  };

  const blocks = new WeakMap(); // reasoning container -> block state
  let blockIds = 0;

  // -- small helpers -----------------------------------------------------------

  function readStorage(storage, name) {
    try {
      return storage.getItem(name) || '';
    } catch {
      return ''; // storage disabled: the page still works for this visit
    }
  }

  function writeStorage(storage, name, value) {
    try {
      if (value) storage.setItem(name, value);
      else storage.removeItem(name);
    } catch {
      // storage disabled: the choice lasts until the page is left
    }
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(name, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === 'string' ? document.createTextNode(child) : child);
    }
    return node;
  }

  function codePoints(text) {
    // the proxy counts characters as Python does (code points), so the page does too
    let n = 0;
    for (const _ of text) n += 1;
    return n;
  }

  function preview(text) {
    // whitespace folded to single spaces: the preview is one line, read from
    // a bounded window that starts at the first visible character and never
    // ends inside a character (half of a surrogate pair)
    const from = Math.max(0, text.search(/\S/));
    let head = text.slice(from, from + 25 * PREVIEW_CHARS);
    if (/[\uD800-\uDBFF]$/.test(head)) head = head.slice(0, -1);
    const chars = Array.from(head.replace(/\s+/g, ' ').trim());
    const more = chars.length > PREVIEW_CHARS || from + head.length < text.length;
    return more ? `${chars.slice(0, PREVIEW_CHARS).join('').trimEnd()}…` : chars.join('');
  }

  function clock(seconds) {
    // with the date: stored conversations outlive the day they started
    if (!seconds) return '';
    return new Date(seconds * 1000).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  }

  function timeEl(seconds) {
    return el('time', { datetime: new Date(seconds * 1000).toISOString() }, clock(seconds));
  }

  function tenantScope() {
    return state.key ? "this key's conversations" : 'anonymous conversations';
  }

  function unsendable(key) {
    // A header value is bytes: fetch() refuses a character beyond Latin-1,
    // NUL, CR and LF. The first such one, named, or '' when all is well.
    for (const char of key) {
      const code = char.codePointAt(0);
      if (code > 0xff || code === 0 || code === 0x0a || code === 0x0d) {
        const hex = `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
        // an invisible one (a zero-width space) by its code alone
        return code > 0xff && !/[\p{Cf}\p{Z}]/u.test(char) ? `"${char}" (${hex})` : hex;
      }
    }
    return '';
  }

  function authHeaders() {
    return state.key ? { Authorization: `Bearer ${state.key}` } : {};
  }

  async function errorOf(response) {
    let message = `HTTP ${response.status}`;
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) message = body.error.message;
    } catch {
      // not the proxy's JSON error shape: the status says enough
    }
    const error = new Error(message);
    error.status = response.status;
    return error;
  }

  async function api(path) {
    const response = await fetch(path, { headers: authHeaders(), cache: 'no-store' });
    if (!response.ok) throw await errorOf(response);
    return response.json();
  }

  function showError(message) {
    const box = $('error');
    box.textContent = message || '';
    box.hidden = !message;
  }

  function setStatus(kind, text) {
    const status = $('live-status');
    status.dataset.state = kind;
    status.textContent = text;
  }

  // Stay pinned to the bottom while a stream grows, unless the reader scrolled
  // up. Whether the pane is at its bottom is learnt from its scroll events and
  // the scroll happens once per frame: measuring the pane on every delta made
  // the browser lay the whole conversation out again for each one.
  let pinned = true;
  let scrollQueued = false;
  let autoTop = 0; // where the page itself last scrolled the pane to

  function scrollToBottom() {
    const pane = $('conversation');
    pane.scrollTop = pane.scrollHeight;
    autoTop = pane.scrollTop;
    pinned = true;
  }

  function onPaneScroll() {
    const pane = $('conversation');
    const atBottom = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 48;
    // the event of the page's own scroll may come after the stream grew again:
    // only a scroll up, away from where the page put it, unpins
    pinned = atBottom || (pinned && pane.scrollTop >= autoTop);
  }

  function keepScroll(change) {
    change();
    if (!pinned || scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      if (pinned) scrollToBottom();
    });
  }

  // -- theme -------------------------------------------------------------------

  function applyTheme() {
    const forced = readStorage(localStorage, THEME_STORAGE);
    const root = document.documentElement;
    if (forced) root.dataset.theme = forced;
    else delete root.dataset.theme;
    const dark = forced ? forced === 'dark' : darkQuery.matches;
    // the button names the theme it switches to
    const button = $('theme-toggle');
    button.dataset.current = dark ? 'dark' : 'light';
    button.textContent = dark ? 'Light theme' : 'Dark theme';
    button.title = dark ? 'Switch to the light theme' : 'Switch to the dark theme';
  }

  function toggleTheme() {
    const dark = $('theme-toggle').dataset.current !== 'dark';
    // back at the system's choice: follow the system again
    writeStorage(localStorage, THEME_STORAGE, dark === darkQuery.matches ? '' : dark ? 'dark' : 'light');
    applyTheme();
  }

  // -- reasoning blocks ----------------------------------------------------------

  function createBlock({ msgId, index, text, tokens, expanded, streaming }) {
    const id = `reasoning-${++blockIds}`;
    const chevron = el('span', { class: 'chevron', 'aria-hidden': 'true' });
    const label = el('span', { class: 'preview' });
    const tokensEl = el('span', { class: 'tokens' });
    const toggle = el(
      'button',
      { type: 'button', class: 'reasoning-toggle', 'data-ai-reasoning-toggle': '', 'aria-controls': id },
      chevron,
      label,
      tokensEl,
    );
    const textEl = el('div', { class: 'reasoning-text', id });
    const container = el(
      'div',
      { class: 'reasoning', 'data-ai-reasoning': '', 'data-msg-id': msgId, 'data-block-index': String(index) },
      toggle,
      textEl,
    );
    const block = {
      msgId, index, text: '', chars: 0, tokens, streaming, collapsed: !expanded,
      container, toggle, chevron, label, tokensEl, textEl, line: null,
    };
    blocks.set(container, block);
    appendThought(block, text);
    setStreaming(block, streaming);
    setCollapsed(block, !expanded);
    return block;
  }

  function appendThought(block, text) {
    if (!text) return;
    block.text += text;
    block.chars += codePoints(text);
    // one element per source line, so each line carries its own gutter
    text.split('\n').forEach((part, i) => {
      if (i > 0 || !block.line) {
        block.line = el('div', { class: 'rline' }, '');
        block.textEl.append(block.line);
      }
      if (part) block.line.firstChild.appendData(part);
    });
    updateBlock(block);
  }

  function blockTokens(block) {
    return block.tokens ?? Math.ceil(block.chars / 4);
  }

  function updateBlock(block) {
    const tokens = blockTokens(block);
    block.container.dataset.tokenEst = String(tokens);
    block.tokensEl.textContent = `${block.tokens === null ? '~' : ''}${tokens} tokens`;
    block.label.textContent = block.collapsed ? `"${preview(block.text)}"` : 'Reasoning';
  }

  function setCollapsed(block, collapsed) {
    block.collapsed = collapsed;
    block.container.dataset.collapsed = String(collapsed);
    block.toggle.setAttribute('aria-expanded', String(!collapsed));
    block.toggle.title = collapsed ? 'Show the reasoning' : 'Hide the reasoning';
    block.chevron.textContent = collapsed ? '▶' : '▼';
    block.textEl.hidden = collapsed;
    updateBlock(block);
  }

  function setStreaming(block, streaming) {
    block.streaming = streaming;
    block.container.dataset.streaming = String(streaming);
  }

  function onToggle(toggle) {
    const block = blocks.get(toggle.closest('[data-ai-reasoning]'));
    if (!block) return;
    const expanded = block.collapsed;
    setCollapsed(block, !expanded);
    state.expanded.set(`${block.msgId}#${block.index}`, expanded);
    toggle.dispatchEvent(
      new CustomEvent('svmai:event', {
        bubbles: true,
        composed: true,
        detail: {
          type: 'reasoning_toggle',
          payload: { msgId: block.msgId, expanded, tokens: blockTokens(block) },
        },
      }),
    );
  }

  // -- turns ---------------------------------------------------------------------

  function notice(text, kind) {
    return el('p', { class: 'notice', 'data-notice': kind }, text);
  }

  function usageText(usage) {
    if (!usage || typeof usage !== 'object') return null;
    const parts = [];
    if (Number.isFinite(usage.prompt_tokens)) parts.push(`prompt ${usage.prompt_tokens}`);
    if (Number.isFinite(usage.completion_tokens)) parts.push(`completion ${usage.completion_tokens}`);
    const details = usage.completion_tokens_details;
    if (details && Number.isFinite(details.reasoning_tokens)) parts.push(`reasoning ${details.reasoning_tokens}`);
    return parts.length ? `tokens: ${parts.join(', ')}` : null;
  }

  function renderStoredTurn(conversation, turn) {
    const msgId = `${conversation}:${turn.index}`;
    const head = el(
      'header',
      { class: 'turn-head' },
      el('h3', { class: 'n' }, `Turn ${turn.index + 1}`),
      turn.model ? el('span', { class: 'model' }, turn.model) : null,
      turn.route ? el('span', { class: 'route' }, `route ${turn.route}`) : null,
      turn.finishReason ? el('span', { class: 'finish' }, `finish: ${turn.finishReason}`) : null,
      usageText(turn.usage) ? el('span', { class: 'usage' }, usageText(turn.usage)) : null,
      turn.created ? timeEl(turn.created) : null,
      turn.complete === false ? el('span', { class: 'badge warn' }, 'incomplete') : null,
      turn.persisted === false ? el('span', { class: 'badge warn' }, 'not stored') : null,
      turn.reasoningTruncated ? truncatedBadge() : null,
      turn.refusal ? refusalBadge() : null,
    );
    const body = el('div', { class: 'turn-body' });
    const visible = (turn.blocks || []).filter((b) => !b.isHidden && b.thought);
    visible.forEach((b, index) => {
      const expanded = state.expanded.get(`${msgId}#${index}`) === true;
      const tokens = Number.isInteger(b.tokens) ? b.tokens : null;
      body.append(createBlock({ msgId, index, text: b.thought, tokens, expanded, streaming: false }).container);
    });
    const tools = turn.toolCallIds || [];
    if (turn.content) body.append(el('div', { class: 'answer' }, turn.content));
    else if (visible.length && !tools.length) body.append(notice(NO_ANSWER, 'reasoning-only'));
    else if (!tools.length) body.append(notice('No response.', 'empty'));
    if (tools.length) body.append(renderToolCalls(turn.toolCalls, tools));
    return el(
      'article',
      { class: 'turn', 'data-msg-id': msgId, 'data-state': 'stored', 'data-turn-index': String(turn.index) },
      head,
      renderInput(turn.input),
      renderEgress(turn.egress),
      body,
    );
  }

  // -- the rest of the exchange: input, tool calls, what went upstream ------------

  function prettyJson(text) {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      return text; // arguments as the model wrote them, valid JSON or not
    }
  }

  function renderToolCalls(calls, ids) {
    // name and arguments where the store has them; ids alone otherwise
    const known = Array.isArray(calls) && calls.length ? calls : ids.map((id) => ({ id, name: '', arguments: '' }));
    const list = el('ul', { class: 'tool-calls', 'aria-label': 'Tool calls' });
    for (const call of known) {
      list.append(
        el(
          'li',
          { class: 'tool-call', 'data-tool-call-id': call.id || '' },
          el('span', { class: 'tool-name' }, `→ ${call.name || 'tool call'}`),
          call.id ? el('span', { class: 'tool-id' }, call.id) : null,
          call.arguments ? el('pre', { class: 'tool-args' }, prettyJson(call.arguments)) : null,
        ),
      );
    }
    return list;
  }

  function renderInput(input) {
    // the request's messages after its latest assistant message (ui.show_prompts)
    if (!Array.isArray(input) || !input.length) return null;
    const box = el('div', { class: 'turn-input' });
    for (const item of input) {
      const tool = item.role === 'tool';
      const label = tool ? `Tool result${item.toolCallId ? ` · ${item.toolCallId}` : ''}` : item.role === 'user' ? 'User' : item.role;
      const text = item.cut ? `${item.text}… (+${item.cut} characters)` : item.text;
      box.append(
        el(
          'div',
          { class: tool ? 'input tool-result' : 'input prompt', 'data-role': item.role, 'data-tool-call-id': item.toolCallId || null },
          el('span', { class: 'input-label' }, label),
          el('div', { class: 'input-text' }, text),
        ),
      );
    }
    return box;
  }

  const EGRESS_ACTIONS = {
    reinjected: 're-injected from the store',
    passed: "sent on (the client's own)",
    stripped: 'stripped',
    none: 'none known',
  };

  const EGRESS_WORDS = { reinjected: 're-injected', passed: 'sent on', stripped: 'stripped', none: 'none known' };

  function renderEgress(egress) {
    // what the proxy did with earlier reasoning in the request that made this turn
    if (!egress || !Array.isArray(egress.messages)) return null;
    // a long request's earliest messages are counted by action, not noted one by one
    const earlier = egress.earlier && typeof egress.earlier === 'object' ? egress.earlier : {};
    const counts = { ...earlier };
    for (const note of egress.messages) counts[note.action] = (counts[note.action] || 0) + 1;
    const parts = actionCounts(counts);
    const summary = egress.messages.length
      ? `Sent upstream: ${parts.join(', ')} (${egress.dialect})`
      : `Sent upstream: no earlier assistant message (${egress.dialect})`;
    const details = el(
      'details',
      { class: 'egress', 'data-compressed': egress.compressed || null },
      el('summary', {}, egress.compressed ? `${summary}, compressed to ${egress.compressed}` : summary),
    );
    const settings = `include_in_context ${egress.include}, strip_from_context ${egress.strip}`;
    details.append(el('p', { class: 'egress-settings' }, egress.compressed ? `${settings}, tightened to ${egress.compressed} to fit the context` : settings));
    if (!egress.messages.length) return details;
    // a note per earlier assistant message: turn n of a long conversation has
    // n of them, so they are drawn when the reader opens the fold, not before
    details.addEventListener('toggle', () => {
      if (details.open && !details.querySelector('.egress-list')) details.querySelector('summary').after(egressList(egress));
    });
    return details;
  }

  function actionCounts(counts) {
    return Object.entries(counts).map(([action, n]) => `${n} ${EGRESS_WORDS[action] || action}`);
  }

  function egressList(egress) {
    const list = el('ol', { class: 'egress-list' });
    const earlier = egress.earlier && typeof egress.earlier === 'object' ? egress.earlier : null;
    if (earlier) {
      const n = Object.values(earlier).reduce((a, b) => a + b, 0);
      list.append(el('li', { class: 'egress-earlier' }, `${n} earlier assistant messages: ${actionCounts(earlier).join(', ')}`));
    }
    for (const note of egress.messages) {
      list.append(
        el(
          'li',
          { 'data-action': note.action, 'data-index': String(note.index) },
          el('span', { class: 'egress-action' }, `Message ${note.index + 1}${note.toolCall ? ' (tool call)' : ''}: ${EGRESS_ACTIONS[note.action] || note.action}`),
          note.why ? el('span', { class: 'egress-why' }, note.why) : null,
          note.placeholder ? el('span', { class: 'egress-why' }, "the dialect's placeholder went in its place") : null,
        ),
      );
    }
    return list;
  }

  function createLiveTurn(event) {
    const turn = {
      id: event.turnId,
      conversation: event.conversation,
      tenant: event.tenant || null, // named on the admin's feed only
      msgId: `${event.conversation}:live-${event.turnId}`,
      model: event.model || null,
      route: event.route || null,
      created: event.created || null,
      blocks: [],
      current: null, // the reasoning block or answer element being written
      answer: '',
      done: false,
      persisted: true,
      endSeq: 0,
      seen: Date.now(), // its last event (forgetStale)
    };
    turn.badge = el('span', { class: 'badge live' }, 'streaming');
    turn.head = el(
      'header',
      { class: 'turn-head' },
      el('h3', { class: 'n' }, 'Live turn'),
      turn.model ? el('span', { class: 'model' }, turn.model) : null,
      turn.route ? el('span', { class: 'route' }, `route ${turn.route}`) : null,
      turn.created ? timeEl(turn.created) : null,
      turn.badge,
    );
    turn.body = el('div', { class: 'turn-body' });
    turn.el = el(
      'article',
      { class: 'turn', 'data-msg-id': turn.msgId, 'data-state': 'live', 'data-turn-id': turn.id },
      turn.head,
      turn.body,
    );
    return turn;
  }

  function finishReasoning(turn) {
    const block = turn.current;
    if (!block || !block.container) return;
    setStreaming(block, false);
    // the reasoning steps aside once the answer starts, unless the reader opened it again
    const opened = state.expanded.get(`${block.msgId}#${block.index}`) === true;
    setCollapsed(block, !opened);
  }

  function liveDelta(turn, kind, text) {
    if (kind === 'reasoning') {
      if (!turn.current || !turn.current.container) {
        const index = turn.blocks.length;
        const expanded = state.expanded.get(`${turn.msgId}#${index}`) !== false;
        turn.current = createBlock({ msgId: turn.msgId, index, text: '', tokens: null, expanded, streaming: true });
        turn.blocks.push(turn.current);
        turn.body.append(turn.current.container);
      }
      appendThought(turn.current, text);
    } else if (kind === 'content') {
      if (!turn.current || turn.current.container) {
        finishReasoning(turn);
        turn.current = { answer: el('div', { class: 'answer' }, '') };
        turn.body.append(turn.current.answer);
      }
      turn.current.answer.firstChild.appendData(text);
      turn.answer += text;
    }
  }

  function truncatedBadge() {
    return el(
      'span',
      {
        class: 'badge warn',
        'data-badge': 'truncated',
        title: 'The reasoning was longer than limits.max_reasoning_bytes: it is stored up to that bound.',
      },
      'reasoning truncated',
    );
  }

  function refusalBadge() {
    return el(
      'span',
      {
        class: 'badge warn',
        'data-badge': 'refusal',
        title: "The model declined: the answer came in chat's refusal field.",
      },
      'refusal',
    );
  }

  function endLiveTurn(turn, event) {
    finishReasoning(turn);
    turn.current = null;
    turn.done = true;
    turn.persisted = event.persisted !== false;
    turn.endSeq = state.eventSeq;
    turn.el.dataset.state = 'ended';
    turn.badge.remove();
    if (event.finishReason) turn.head.append(el('span', { class: 'finish' }, `finish: ${event.finishReason}`));
    if (event.complete === false) turn.head.append(el('span', { class: 'badge warn' }, 'incomplete'));
    if (event.reasoningTruncated) turn.head.append(truncatedBadge());
    if (event.refusal) turn.head.append(refusalBadge());
    if (!turn.persisted) {
      forgetOldUnstored();
      turn.head.append(el('span', { class: 'badge warn' }, 'not stored'));
      if (!turn.answer) {
        turn.body.append(turn.blocks.length ? notice(NO_ANSWER, 'reasoning-only') : notice('No response.', 'empty'));
      }
    }
  }

  function forgetUnfinished() {
    // The feed broke off (the proxy restarted, the network dropped) or lost
    // events: a turn drawn as streaming may have ended unheard, and would
    // say "streaming" for good. The store says how it ended; one still
    // running comes back with its next event (drawn from there on).
    for (const [id, turn] of state.live) {
      if (turn.done) continue;
      state.live.delete(id);
      turn.el.remove();
    }
  }

  async function forgetStale() {
    // A turn whose replica died mid-stream (its events came over Redis) has
    // no turn_end coming: past the longest upstream idle timeout (a live
    // proxy ends a stream that idle itself) it is taken for ended, and the
    // store says how. One still running comes back with its next event.
    if (!state.staleAfter) return;
    const before = Date.now() - state.staleAfter * 1000;
    let forgot = false;
    for (const [id, turn] of state.live) {
      if (turn.done || turn.seen > before) continue;
      state.live.delete(id);
      turn.el.remove();
      forgot = true;
    }
    if (forgot) await refresh();
  }

  function forgetOldUnstored() {
    // while the store is down, only the feed holds finished turns: keep the latest few
    const unstored = [...state.live.values()].filter((t) => t.done && !t.persisted);
    for (const turn of unstored.slice(0, Math.max(0, unstored.length + 1 - MAX_UNSTORED_TURNS))) {
      state.live.delete(turn.id);
      turn.el.remove();
    }
  }

  // -- conversations -----------------------------------------------------------

  function refOf(conversation, tenant) {
    return state.scope === 'all' ? `${tenant ?? '?'}/${conversation}` : conversation;
  }

  function entryForLive(conversation, tenant) {
    // The admin's feed names each event's tenant; a tenant's own feed does not
    // need to (it only carries that tenant's conversations).
    const known = state.conversations.get(refOf(conversation, tenant ?? null));
    if (known) return known;
    if (state.scope === 'all' && !tenant) {
      let best = null;
      for (const entry of state.conversations.values()) {
        if (entry.id === conversation && (!best || entry.updated > best.updated)) best = entry;
      }
      if (best) return best;
    }
    const entry = {
      ref: refOf(conversation, tenant ?? null), id: conversation, tenant: tenant ?? null,
      turns: 0, updated: 0, model: null, context: null,
    };
    state.conversations.set(entry.ref, entry);
    return entry;
  }

  function owns(entry, turn) {
    // on the admin's page two tenants may each have a conversation of one id:
    // a turn belongs to the one of its tenant (a tenant's own page has one)
    if (!entry || turn.conversation !== entry.id) return false;
    return state.scope !== 'all' || !turn.tenant || !entry.tenant || turn.tenant === entry.tenant;
  }

  function shownEntry() {
    return state.conversations.get(state.selected);
  }

  function isStreaming(entry) {
    for (const turn of state.live.values()) if (owns(entry, turn) && !turn.done) return true;
    return false;
  }

  function renderList() {
    const list = $('conversations');
    const focused = document.activeElement && document.activeElement.dataset.ref;
    const all = [...state.conversations.values()].sort((a, b) => b.updated - a.updated);
    renderModelFilter(all);
    const entries = all.filter(matchesFilter);
    list.replaceChildren(
      ...entries.map((c) => {
        const meta = [c.model, c.turns ? `${c.turns} turn${c.turns === 1 ? '' : 's'}` : null, clock(c.updated)];
        if (state.scope === 'all' && c.tenant) meta.unshift(`tenant ${c.tenant.slice(0, 10)}`);
        const button = el(
          'button',
          {
            type: 'button',
            class: 'conversation-item',
            'data-ref': c.ref,
            'data-conversation': c.id,
            'data-live': String(isStreaming(c)),
            'aria-current': c.ref === state.selected ? 'true' : null,
          },
          el('span', { class: 'id' }, c.id),
          el('span', { class: 'meta' }, ...separated(meta.filter(Boolean))),
        );
        return el('li', {}, button);
      }),
    );
    $('no-conversations').hidden = all.length > 0 || !state.listed;
    $('no-match').hidden = entries.length > 0 || all.length === 0;
    $('more-conversations').hidden = !state.hasMore;
    if (focused) list.querySelector(`[data-ref="${CSS.escape(focused)}"]`)?.focus();
  }

  function matchesFilter(entry) {
    // search: id, model or tenant contain the text (any case); filter: the model
    const model = $('model-filter').value;
    if (model && entry.model !== model) return false;
    const query = $('search').value.trim().toLowerCase();
    if (!query) return true;
    return [entry.id, entry.model, entry.tenant].some((v) => typeof v === 'string' && v.toLowerCase().includes(query));
  }

  function separated(parts) {
    // each part its own element, so the style can isolate it (a model name's
    // right-to-left override must not reorder the count and date after it)
    return parts.flatMap((part, i) => [i ? ' · ' : null, el('span', {}, part)]);
  }

  function renderModelFilter(entries) {
    const select = $('model-filter');
    const models = [...new Set(entries.map((c) => c.model).filter(Boolean))].sort();
    const current = select.value;
    if (current && !models.includes(current)) models.push(current);
    const shown = [...select.options].slice(1).map((o) => o.value);
    if (shown.join('\n') === models.join('\n')) return;
    select.replaceChildren(el('option', { value: '' }, 'All models'), ...models.map((m) => el('option', { value: m }, m)));
    select.value = current;
  }

  // -- deleting a conversation (its tenant, or the admin naming the tenant) --------

  function resetDelete() {
    const button = $('delete');
    delete button.dataset.confirm;
    button.textContent = 'Delete';
  }

  async function deleteSelected() {
    const button = $('delete');
    const entry = state.conversations.get(state.selected);
    if (!entry) return;
    if (button.dataset.confirm !== 'true') {
      // a second click confirms: one stray click deletes nothing
      button.dataset.confirm = 'true';
      button.textContent = 'Delete: sure?';
      return;
    }
    resetDelete();
    const focused = document.activeElement === button;
    const query = state.scope === 'all' ? `?tenant=${encodeURIComponent(entry.tenant ?? '')}` : '';
    let response;
    try {
      response = await fetch(`v1/conversations/${encodeURIComponent(entry.id)}${query}`, {
        method: 'DELETE',
        headers: authHeaders(),
        cache: 'no-store',
      });
    } catch {
      showError('The proxy could not be reached; nothing was deleted.');
      return;
    }
    if (!response.ok && response.status !== 404) {
      showError((await errorOf(response)).message);
      return;
    }
    showError('');
    state.conversations.delete(entry.ref);
    if (state.selected === entry.ref) {
      state.selected = null;
      state.stored = null;
    }
    renderList();
    renderConversation();
    await loadConversations();
    // the button went with the conversation: a keyboard user goes on from the list
    if (focused && !button.contains(document.activeElement)) {
      ($('conversations').querySelector('[aria-current="true"]') || $('search')).focus();
    }
  }

  function forgetConversation(ref, why) {
    // deleted (on this page, on another, or through the API) or no longer
    // stored: off the list, and off the screen with a word on why; a stream
    // of it still running keeps it listed, since its turn is stored anew
    const entry = state.conversations.get(ref);
    if (!entry) return;
    for (const [id, turn] of state.live) {
      if (owns(entry, turn) && turn.done) {
        state.live.delete(id);
        turn.el.remove();
      }
    }
    const shown = state.selected === ref;
    if (isStreaming(entry)) {
      entry.turns = 0;
      entry.context = null;
    } else {
      state.conversations.delete(ref);
      if (shown) state.selected = null;
    }
    if (shown) {
      state.stored = null;
      $('gone').textContent = why;
      $('gone').hidden = false;
    }
    renderList();
    renderConversation();
  }

  async function loadConversations() {
    const generation = state.generation;
    let data;
    try {
      data = await api('v1/conversations?limit=1000');
    } catch (error) {
      if (generation === state.generation) showError(error.message);
      return;
    }
    if (generation !== state.generation) return;
    showError('');
    const previous = state.conversations;
    const next = new Map();
    for (const item of data.data || []) {
      const ref = refOf(item.id, item.tenant);
      next.set(ref, {
        ref, id: item.id, tenant: item.tenant ?? null, turns: item.turns,
        updated: item.updated, model: item.model, context: previous.get(ref)?.context ?? null,
      });
    }
    // conversations seen only on the feed so far (not stored yet) stay listed
    for (const entry of previous.values()) {
      if (next.has(entry.ref)) continue;
      // a feed entry whose tenant was not named is the stored one of its id;
      // one whose tenant is named is not another tenant's of the same id
      const known = [...next.values()].filter((c) => c.id === entry.id && (entry.tenant === null || c.tenant === entry.tenant));
      if (known.length) {
        if (state.selected === entry.ref) state.selected = known.sort((a, b) => b.updated - a.updated)[0].ref;
      } else if ([...state.live.values()].some((t) => owns(entry, t))) {
        next.set(entry.ref, entry);
      }
    }
    state.conversations = next;
    state.listed = true;
    state.hasMore = data.has_more === true;
    if (state.selected && !next.has(state.selected)) state.selected = null;
    renderList();
    if (!state.selected && next.size) {
      await select([...next.values()].sort((a, b) => b.updated - a.updated)[0].ref);
    } else if (!state.selected) {
      renderConversation();
    }
  }

  async function select(ref) {
    state.selected = ref;
    $('gone').hidden = true;
    state.stored = null;
    renderList();
    renderConversation();
    await loadSelected(true);
  }

  async function loadSelected(scrollDown) {
    const entry = state.conversations.get(state.selected);
    if (!entry) return;
    const generation = state.generation;
    const load = ++state.loadSeq;
    const seenEvents = state.eventSeq;
    let data = null;
    let gone = false;
    // nothing is stored before a conversation's first turn ends; don't ask
    if (entry.turns > 0 && (state.scope !== 'all' || entry.tenant)) {
      const query = state.scope === 'all' ? `?tenant=${encodeURIComponent(entry.tenant)}` : '';
      try {
        data = await api(`v1/conversations/${encodeURIComponent(entry.id)}${query}`);
      } catch (error) {
        if (error.status === 404) gone = true;
        else if (generation === state.generation) showError(error.message);
      }
    }
    if (generation !== state.generation || load !== state.loadSeq || state.selected !== entry.ref) return;
    if (gone) {
      forgetConversation(entry.ref, `Conversation ${entry.id} is no longer stored: it was deleted.`);
      return;
    }
    if (data) {
      state.stored = data;
      if (data.tokens) entry.context = data.tokens;
      // finished turns the store already holds are drawn from the store now
      for (const [id, turn] of state.live) {
        if (owns(entry, turn) && turn.done && turn.persisted && turn.endSeq <= seenEvents) {
          carryExpansions(turn, data);
          state.live.delete(id);
        }
      }
    }
    renderConversation();
    if (scrollDown) scrollToBottom();
  }

  function carryExpansions(turn, data) {
    // a block the reader opened while it streamed stays open in the stored drawing
    const stored = data.turns[data.turns.length - 1];
    if (!stored) return;
    for (const block of turn.blocks) {
      if (state.expanded.get(`${turn.msgId}#${block.index}`) === true) {
        state.expanded.set(`${data.id}:${stored.index}#${block.index}`, true);
      }
    }
  }

  function renderContext(entry) {
    const box = $('context');
    const context = entry && entry.context;
    box.hidden = !context;
    box.dataset.effective = context ? String(context.effective) : '';
    box.dataset.raw = context ? String(context.raw) : '';
    $('context-effective').textContent = context ? String(context.effective) : '0';
    $('context-raw').textContent = context ? String(context.raw) : '0';
  }

  function renderConversation() {
    const entry = state.conversations.get(state.selected);
    $('conversation-title').textContent = entry ? entry.id : 'No conversation selected';
    $('conversation-title').classList.toggle('placeholder', !entry);
    // only a stored conversation can be deleted; a new selection asks again
    const deletable = Boolean(entry && state.stored && state.stored.id === entry.id);
    if ($('delete').dataset.ref !== (entry ? entry.ref : '')) resetDelete();
    $('delete').dataset.ref = entry ? entry.ref : '';
    $('delete').hidden = !deletable;
    renderContext(entry);
    const turns = [];
    if (entry && state.stored && state.stored.id === entry.id) {
      for (const turn of state.stored.turns) turns.push(renderStoredTurn(entry.id, turn));
    }
    if (entry) {
      for (const turn of state.live.values()) if (owns(entry, turn)) turns.push(turn.el);
    }
    // a redraw must not throw the keyboard user's focus back to the top
    const focused = document.activeElement?.closest?.('[data-ai-reasoning]');
    keepScroll(() => $('turns').replaceChildren(...turns));
    $('no-turns').hidden = turns.length > 0;
    if (focused && !focused.isConnected) {
      const { msgId, blockIndex } = focused.dataset;
      $('turns')
        .querySelector(`[data-msg-id="${CSS.escape(msgId)}"][data-block-index="${blockIndex}"] [data-ai-reasoning-toggle]`)
        ?.focus();
    }
  }

  // -- the live feed -------------------------------------------------------------

  async function onFeedEvent(event) {
    state.eventSeq += 1;
    if (event.type === 'hello') {
      const first = state.scope === null;
      state.scope = event.scope;
      state.staleAfter = typeof event.staleAfter === 'number' ? event.staleAfter : 0;
      state.retry = 0;
      setStatus('live', 'live');
      $('scope').textContent = event.scope === 'all' ? 'every tenant (admin)' : tenantScope();
      // after a reconnect, events may have been missed: read the store again
      if (!first) forgetUnfinished();
      await (first ? loadConversations() : refresh());
      return;
    }
    if (event.type === 'dropped') {
      forgetUnfinished();
      await refresh();
      return;
    }
    if (event.type === 'deleted') {
      if (typeof event.conversation === 'string') {
        const ref = refOf(event.conversation, event.tenant ?? null);
        forgetConversation(ref, `Conversation ${event.conversation} was deleted.`);
      }
      return;
    }
    if (!event.turnId || !event.conversation) return;
    let turn = state.live.get(event.turnId);
    if (!turn) {
      // a turn that started before this page listened begins mid-way
      turn = createLiveTurn(event);
      state.live.set(turn.id, turn);
      await onTurnStart(turn, event);
    }
    turn.seen = Date.now();
    if (event.type === 'delta') {
      const shown = owns(shownEntry(), turn);
      if (shown) keepScroll(() => liveDelta(turn, event.kind, event.text || ''));
      else liveDelta(turn, event.kind, event.text || '');
    } else if (event.type === 'turn_end') {
      endLiveTurn(turn, event);
      await loadConversations();
      if (owns(shownEntry(), turn)) await loadSelected(false);
      else if (turn.persisted) state.live.delete(turn.id);
      renderList();
    }
  }

  async function onTurnStart(turn, event) {
    const entry = entryForLive(turn.conversation, turn.tenant);
    entry.updated = event.created || Date.now() / 1000;
    if (turn.model) entry.model = turn.model;
    if (event.context) entry.context = event.context;
    renderList();
    const shown = owns(shownEntry(), turn);
    if (shown) {
      renderContext(entry);
      keepScroll(() => $('turns').append(turn.el));
      $('no-turns').hidden = true;
    } else if ($('follow').checked || !state.selected) {
      await select(entry.ref);
    }
  }

  function parseEvent(raw) {
    const data = raw
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5))
      .join('\n');
    if (!data) return null; // a comment (keep-alive)
    try {
      return JSON.parse(data);
    } catch {
      return null;
    }
  }

  async function listen(generation) {
    const controller = new AbortController();
    state.stream = controller;
    let stop = false;
    try {
      const response = await fetch('ui/events', {
        headers: authHeaders(),
        signal: controller.signal,
        cache: 'no-store',
      });
      if (!response.ok) {
        const error = await errorOf(response);
        showError(error.message);
        setStatus('error', 'not connected');
        stop = error.status === 401 || error.status === 403; // retrying cannot help; a new key can
        if (error.status === 401) $('scope').textContent = state.key ? 'a key this proxy refuses' : 'no key (this proxy requires one)';
      } else {
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, '\n');
          let cut;
          while ((cut = buffer.indexOf('\n\n')) >= 0) {
            const event = parseEvent(buffer.slice(0, cut));
            buffer = buffer.slice(cut + 2);
            if (event && generation === state.generation) await onFeedEvent(event);
          }
        }
      }
    } catch {
      // network failure or abort: handled below
    }
    if (stop || controller.signal.aborted || generation !== state.generation) return;
    setStatus('connecting', 'reconnecting…');
    const delay = Math.min(MAX_RETRY_MS, 500 * 2 ** state.retry);
    state.retry += 1;
    setTimeout(() => {
      if (generation === state.generation) listen(generation);
    }, delay);
  }

  async function refresh() {
    await loadConversations();
    if (state.selected) await loadSelected(false);
  }

  function restart() {
    state.generation += 1;
    if (state.stream) state.stream.abort();
    state.scope = null;
    state.conversations = new Map();
    state.listed = false;
    state.selected = null;
    state.stored = null;
    state.live = new Map();
    state.retry = 0;
    showError('');
    $('gone').hidden = true;
    setStatus('connecting', 'connecting…');
    $('scope').textContent = tenantScope();
    renderList();
    renderConversation();
    const bad = unsendable(state.key);
    if (bad) {
      // fetch() would refuse every request, and the feed retry for good
      showError(
        `That key cannot be sent: it holds ${bad}, which an HTTP header cannot carry. ` +
          'Enter the key again without it (a paste can bring along invisible characters).',
      );
      setStatus('error', 'not connected');
      $('scope').textContent = 'a key that cannot be sent';
      return;
    }
    // The list waits for the feed's hello, which says whether the caller is
    // the admin (whose list spans tenants); without a feed, load it anyway.
    const generation = state.generation;
    listen(generation);
    setTimeout(() => {
      if (state.scope === null && generation === state.generation) loadConversations();
    }, 1500);
  }

  // -- wiring --------------------------------------------------------------------

  function start() {
    applyTheme();
    darkQuery.addEventListener('change', applyTheme);
    $('theme-toggle').addEventListener('click', toggleTheme);
    $('key').value = state.key;
    $('key-form').addEventListener('submit', (event) => {
      event.preventDefault();
      state.key = $('key').value.trim();
      writeStorage(sessionStorage, KEY_STORAGE, state.key);
      restart();
    });
    $('key-clear').addEventListener('click', () => {
      $('key').value = '';
      state.key = '';
      writeStorage(sessionStorage, KEY_STORAGE, '');
      restart();
    });
    $('conversation').addEventListener('scroll', onPaneScroll, { passive: true });
    $('refresh').addEventListener('click', refresh);
    $('search').addEventListener('input', renderList);
    $('model-filter').addEventListener('change', renderList);
    $('delete').addEventListener('click', deleteSelected);
    // an armed Delete stands down when the reader moves on (or presses Escape)
    $('delete').addEventListener('blur', resetDelete);
    $('delete').addEventListener('keydown', (event) => {
      if (event.key === 'Escape') resetDelete();
    });
    $('conversations').addEventListener('click', (event) => {
      const item = event.target.closest('[data-ref]');
      if (item) select(item.dataset.ref);
    });
    document.addEventListener('click', (event) => {
      const toggle = event.target.closest('[data-ai-reasoning-toggle]');
      if (toggle) onToggle(toggle);
    });
    setInterval(forgetStale, STALE_CHECK_MS);
    restart();
  }

  start();
})();
