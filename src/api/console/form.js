// A form rendered from a JSON Schema, for `input_required` answers and a workflow's input. Objects, strings (enums as
// a select), numbers, integers and booleans get their own controls; anything richer is a JSON
// text area. The server checks the answer against the schema again; its 422 is shown as is.

import { h } from './ui.js';

let counter = 0;
const uid = (name) => `f${++counter}-${String(name).replace(/[^a-zA-Z0-9_-]/g, '_')}`;

function typeOf(schema) {
  if (!schema || typeof schema !== 'object') return 'any';
  if (Array.isArray(schema.enum)) return 'enum';
  const t = Array.isArray(schema.type) ? schema.type.find((x) => x !== 'null') : schema.type;
  if (t) return t;
  if (schema.properties) return 'object';
  return 'any';
}

function labelFor(name, schema, required) {
  return [schema?.title || name, required ? ' (required)' : ''].join('');
}

/** One control for `schema`; returns {el, read} where read() gives [value, errorMessage]. */
function control(name, schema, required) {
  const id = uid(name);
  const help = schema?.description ? h('p', { class: 'hint', id: `${id}-help` }, schema.description) : null;
  const describedby = help ? `${id}-help` : null;
  const kind = typeOf(schema);
  if (kind === 'object' && schema.properties) return objectControl(name, schema);
  if (kind === 'boolean') {
    const input = h('input', { id, type: 'checkbox', name, checked: schema.default === true, 'aria-describedby': describedby });
    return { el: h('div', {}, h('label', { class: 'inline', for: id }, input, labelFor(name, schema, false)), help), read: () => [input.checked, null] };
  }
  let input;
  if (kind === 'enum') {
    input = h('select', { id, name, 'aria-describedby': describedby },
      required ? null : h('option', { value: '' }, '(none)'),
      schema.enum.map((v, i) => h('option', { value: String(i) }, typeof v === 'string' ? v : JSON.stringify(v))));
  } else if (kind === 'string') {
    const long = (schema.maxLength || 0) > 200 || schema.format === 'textarea';
    input = h(long ? 'textarea' : 'input', { id, name, type: long ? null : 'text', required, 'aria-describedby': describedby, value: schema.default ?? null });
  } else if (kind === 'number' || kind === 'integer') {
    input = h('input', { id, name, type: 'number', step: kind === 'integer' ? '1' : 'any', required, min: schema.minimum, max: schema.maximum, 'aria-describedby': describedby });
  } else {
    input = h('textarea', { id, name, rows: 4, required, 'aria-describedby': describedby, placeholder: 'JSON' });
  }
  const read = () => readValue(kind, schema, input, required);
  return { el: h('div', {}, h('label', { for: id }, labelFor(name, schema, required)), input, help), read };
}

function readValue(kind, schema, input, required) {
  const raw = input.value;
  if (raw === '' || raw == null) return [undefined, required ? 'is required' : null];
  if (kind === 'enum') return [schema.enum[Number(raw)], null];
  if (kind === 'string') return [raw, null];
  if (kind === 'number' || kind === 'integer') {
    const n = Number(raw);
    if (!Number.isFinite(n) || (kind === 'integer' && !Number.isInteger(n))) return [undefined, `must be ${kind === 'integer' ? 'a whole number' : 'a number'}`];
    return [n, null];
  }
  try {
    return [JSON.parse(raw), null];
  } catch (e) {
    return [undefined, `is not valid JSON (${e.message})`];
  }
}

function objectControl(name, schema) {
  const required = new Set(schema.required || []);
  const fields = Object.entries(schema.properties).map(([key, sub]) => [key, control(key, sub, required.has(key))]);
  const el = h('fieldset', {}, h('legend', {}, schema.title || name), fields.map(([, c]) => c.el));
  const read = () => {
    const out = {};
    const errors = [];
    for (const [key, c] of fields) {
      const [value, error] = c.read();
      if (error) errors.push(`${key} ${error}`);
      else if (value !== undefined) out[key] = value;
    }
    return [out, errors.length ? errors.join('; ') : null];
  };
  return { el, read };
}

/**
 * The answer form for a step asking for input. `schema` may be absent: then the answer is
 * free text, sent as a string, or as JSON when it parses. `name` titles an object's fields.
 */
export function schemaForm(schema, name = 'answer') {
  if (!schema || typeOf(schema) === 'any' && !schema.properties) {
    const id = uid('answer');
    const input = h('textarea', { id, name: 'answer', rows: 3, required: true });
    return {
      el: h('div', {}, h('label', { for: id }, 'Your answer'), input, h('p', { class: 'hint' }, 'Sent as JSON when it parses as JSON, otherwise as text.')),
      read: () => {
        const raw = input.value.trim();
        if (!raw) return [undefined, 'An answer is required.'];
        try { return [JSON.parse(raw), null]; } catch { return [input.value, null]; }
      },
    };
  }
  if (typeOf(schema) === 'object' && !schema.properties) return control(name, { ...schema, type: 'any' }, true);
  const root = control(name, schema, true);
  return { el: root.el, read: root.read };
}
