// Small DOM helpers shared by the views: element builders (text only, never HTML strings),
// formatters and the standard loading, empty and error states.

import { ApiError } from './api.js';

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function announce(text) {
  const region = document.getElementById('announce');
  if (region) region.textContent = text;
}

export function badge(status) {
  return h('span', { class: `badge s-${status}` }, String(status).replace('_', ' '));
}

/** A run's status badge; a run that succeeded with only part of its work done says so, so it
 * never passes for a plain success. */
export function runBadge(run) {
  if (run.status === 'succeeded' && run.completion === 'partial') {
    return h('span', { class: 'badge s-partial', title: 'The run ended, but only part of its work was done: some steps failed or were skipped' }, 'succeeded · partial');
  }
  return badge(run.status);
}

export function shortId(id) {
  return id ? `${id.slice(0, 8)}…${id.slice(-4)}` : '';
}

export function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

export function ms(n) {
  if (n == null) return '—';
  if (n < 1000) return `${Math.round(n)} ms`;
  if (n < 60000) return `${(n / 1000).toFixed(n < 10000 ? 2 : 1)} s`;
  const m = Math.floor(n / 60000);
  const sec = Math.round((n % 60000) / 1000);
  return m < 60 ? `${m} min ${sec} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function elapsed(run) {
  if (!run.created_at) return null;
  const end = run.finished_at ? new Date(run.finished_at) : new Date();
  return end - new Date(run.created_at);
}

export function json(value) {
  return h('pre', { class: 'json', tabindex: '0' }, JSON.stringify(value, null, 2));
}

export function preview(value, max = 120) {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  if (text == null) return '';
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function loading(what) {
  return h('p', { class: 'muted', role: 'status' }, `Loading ${what}…`);
}

export function empty(text, ...more) {
  return h('div', { class: 'empty' }, h('p', {}, text), ...more);
}

/** An error panel: the problem's title, detail, code and field errors, with a retry button. */
export function errorBox(err, retry) {
  const p = err instanceof ApiError ? err.problem : { title: 'Something went wrong', detail: String(err?.message || err) };
  const fields = Array.isArray(p.errors) && p.errors.length
    ? h('ul', {}, p.errors.map((e) => h('li', {}, h('code', {}, e.pointer || '/'), ' ', e.message)))
    : null;
  return h('div', { class: 'panel error-box', role: 'alert' },
    h('strong', {}, p.title || 'Error'),
    p.detail ? h('p', {}, p.detail) : null,
    fields,
    p.code ? h('p', { class: 'hint' }, 'code: ', h('code', {}, p.code)) : null,
    retry ? h('div', { class: 'actions' }, h('button', { type: 'button', class: 'ghost', onclick: retry }, 'Try again')) : null);
}

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'timed_out']);

/** Calls `fn` at most once per `wait` ms, always with the latest arguments. */
export function throttle(fn, wait) {
  let timer = null;
  let pending = false;
  return () => {
    if (timer) { pending = true; return; }
    fn();
    timer = setTimeout(() => { timer = null; if (pending) { pending = false; fn(); } }, wait);
  };
}
