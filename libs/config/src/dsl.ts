/**
 * A small typed schema for settings. Every setting names its environment
 * variable, type, default, unit and a one-sentence doc, and may give the
 * reason behind its default (`why`); docs/settings.md, `.env.example` and
 * docs/decisions/0100-setting-defaults.md are generated from it.
 */

export type Unit =
  'ms' | 'bytes' | 'MiB' | 'count' | 'points' | 'shares' | 'per second' | 'per minute' | 'connections' | 's' | 'percent' | '';

/** The areas of docs/settings.md, in the order they are shown. */
export const AREAS = [
  'mode and stores',
  'gateway',
  'shard and rounds',
  'ledger',
  'router and sequencer',
  'Telegram and boards',
  'telemetry',
  'process tuning',
] as const;
export type Area = (typeof AREAS)[number];

/** Longest `doc`: one sentence that fits a table row. */
export const DOC_MAX_CHARS = 160;

export interface Setting<T> {
  readonly env: string;
  readonly type: string;
  readonly default: T;
  readonly unit: Unit;
  /** What the setting does: one sentence of at most {@link DOC_MAX_CHARS} characters. */
  readonly doc: string;
  /** Why the default is what it is (a measurement and its command, or a rule); not shown in the settings table. */
  readonly why: string | undefined;
  /** The docs/settings.md area, when not its schema section's. */
  readonly area: Area | undefined;
  /** Never printed (logs, generated docs show `(secret)` for a set value). */
  readonly secret: boolean;
  /** Parses the raw string; returns an error message instead of throwing. */
  parse(raw: string): { ok: true; value: T } | { ok: false; error: string };
  /** Default as shown in docs. */
  readonly defaultText: string;
}

interface Common<T> {
  env: string;
  default: T;
  doc: string;
  why?: string;
  area?: Area;
  unit?: Unit;
  secret?: boolean;
}

/** An integer setting with inclusive bounds. Digit separators `_` are accepted (`60_000`). */
export function int(o: Common<number> & { min?: number; max?: number }): Setting<number> {
  const min = o.min ?? Number.MIN_SAFE_INTEGER;
  const max = o.max ?? Number.MAX_SAFE_INTEGER;
  const range = o.min !== undefined || o.max !== undefined ? ` ${o.min ?? '…'}–${o.max ?? '…'}` : '';
  return {
    env: o.env,
    type: `integer${range}`,
    default: o.default,
    unit: o.unit ?? '',
    doc: o.doc,
    why: o.why,
    area: o.area,
    secret: false,
    defaultText: String(o.default),
    parse(raw) {
      const s = raw.trim().replace(/_/g, '');
      if (!/^-?\d+$/.test(s)) return { ok: false, error: `expected an integer, got "${raw}"` };
      const v = Number(s);
      if (!Number.isSafeInteger(v)) return { ok: false, error: `integer out of range: "${raw}"` };
      if (v < min || v > max) return { ok: false, error: `must be between ${min} and ${max}, got ${v}` };
      return { ok: true, value: v };
    },
  };
}

/** A string setting, optionally matched against a pattern. */
export function str(o: Common<string> & { pattern?: RegExp; patternDoc?: string }): Setting<string> {
  return {
    env: o.env,
    type: 'string',
    default: o.default,
    unit: o.unit ?? '',
    doc: o.doc,
    why: o.why,
    area: o.area,
    secret: o.secret ?? false,
    defaultText: o.secret && o.default ? '(dev value)' : o.default === '' ? '(empty)' : o.default,
    parse(raw) {
      if (o.pattern && !o.pattern.test(raw)) return { ok: false, error: `must match ${o.patternDoc ?? String(o.pattern)}, got "${raw}"` };
      return { ok: true, value: raw };
    },
  };
}

/** A URL setting; the empty string means "not set" (use the embedded adapter). */
export function url(o: Common<string> & { protocols: readonly string[] }): Setting<string> {
  return {
    env: o.env,
    type: 'url',
    default: o.default,
    unit: '',
    doc: o.doc,
    why: o.why,
    area: o.area,
    secret: o.secret ?? false,
    defaultText: o.default === '' ? '(empty)' : o.default,
    parse(raw) {
      if (raw === '') return { ok: true, value: '' };
      // NATS accepts a comma-separated server list.
      for (const part of raw.split(',')) {
        let u: URL;
        try {
          u = new URL(part.trim());
        } catch {
          return { ok: false, error: `not a URL: "${part}"` };
        }
        if (!o.protocols.includes(u.protocol.replace(/:$/, ''))) {
          return { ok: false, error: `protocol must be one of ${o.protocols.join(', ')}, got "${u.protocol}"` };
        }
      }
      return { ok: true, value: raw };
    },
  };
}

/** A boolean setting: true/false, 1/0, yes/no, on/off. */
export function bool(o: Common<boolean>): Setting<boolean> {
  return {
    env: o.env,
    type: 'boolean',
    default: o.default,
    unit: '',
    doc: o.doc,
    why: o.why,
    area: o.area,
    secret: false,
    defaultText: String(o.default),
    parse(raw) {
      const s = raw.trim().toLowerCase();
      if (['true', '1', 'yes', 'on'].includes(s)) return { ok: true, value: true };
      if (['false', '0', 'no', 'off'].includes(s)) return { ok: true, value: false };
      return { ok: false, error: `expected true or false (on/off, yes/no and 1/0 work too), got "${raw}"` };
    },
  };
}

/** One of a fixed set of strings. */
export function oneOf<const V extends string>(o: Common<V> & { values: readonly V[] }): Setting<V> {
  return {
    env: o.env,
    type: o.values.join(' \\| '),
    default: o.default,
    unit: '',
    doc: o.doc,
    why: o.why,
    area: o.area,
    secret: false,
    defaultText: o.default,
    parse(raw) {
      const s = raw.trim() as V;
      if (!o.values.includes(s)) return { ok: false, error: `must be one of ${o.values.join(', ')}, got "${raw}"` };
      return { ok: true, value: s };
    },
  };
}

/** A schema is a tree whose leaves are settings. */
export type SchemaTree = { readonly [k: string]: Setting<unknown> | SchemaTree };

/** The typed, parsed value of a schema tree. */
export type ValueOf<S> = S extends Setting<infer T> ? T : { readonly [K in keyof S]: ValueOf<S[K]> };

export function isSetting(x: Setting<unknown> | SchemaTree): x is Setting<unknown> {
  return typeof (x as Setting<unknown>).parse === 'function' && typeof (x as Setting<unknown>).env === 'string';
}

/** Every leaf of a schema tree in declaration order, with its dotted path. */
export function leaves(tree: SchemaTree, path: string[] = []): Array<{ path: string; setting: Setting<unknown> }> {
  const out: Array<{ path: string; setting: Setting<unknown> }> = [];
  for (const [k, v] of Object.entries(tree)) {
    if (isSetting(v)) out.push({ path: [...path, k].join('.'), setting: v });
    else out.push(...leaves(v, [...path, k]));
  }
  return out;
}
