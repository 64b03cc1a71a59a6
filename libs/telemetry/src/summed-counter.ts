import type { Attributes, AttributeValue, Context, Counter } from '@opentelemetry/api';

/**
 * Label sets a {@link SummedCounter} sums on its own, kept for the life of the process: the SDK's default cardinality
 * limit per instrument, so a counter sums every label set a healthy instrument has. An add of a label set past them goes
 * to the SDK at once: counted the same, without the saving.
 */
export const SUMMED_LABEL_SETS_MAX = 2_000;

/** One label set's sum since the last flush. */
interface Sum {
  readonly attrs: Attributes | undefined;
  n: number;
}

/**
 * A counter whose adds are summed per label set in plain numbers and handed to the OpenTelemetry counter in
 * one add per label set when the metrics are collected ({@link SummedCounter.flush}, run by the owner before
 * every collection). An add through the SDK hashes its labels (keys listed, sorted and serialised) and reads
 * the clock each time; on the paths that count every intent and every refusal that was most of the garbage
 * the counting left. Reads (a scrape, a push) see exactly what was added before them.
 *
 * A value that is not a finite number is dropped (the SDK would add it, and its series would read NaN or +Inf
 * for good). A negative value (the SDK warns and drops it), a label whose value is not a string, number or
 * boolean, the context argument, and adds past {@link SUMMED_LABEL_SETS_MAX} label sets go to the SDK at once,
 * so its checks and its cardinality limit apply to them unchanged.
 */
export class SummedCounter implements Counter {
  private readonly sums = new Map<string, Sum>();

  constructor(private readonly sdk: Counter) {}

  /**
   * Adds `value` to the series of `attrs`.
   * @param value a finite number ≥ 0 (a negative one goes to the SDK, which warns and drops it; a non-finite one is dropped)
   */
  add(value: number, attrs?: Attributes, ctx?: Context): void {
    if (!Number.isFinite(value)) return;
    if (ctx !== undefined || value < 0) {
      this.sdk.add(value, attrs, ctx);
      return;
    }
    const key = attrs === undefined ? '' : keyOf(attrs);
    if (key === null) {
      this.sdk.add(value, attrs);
      return;
    }
    const sum = this.sums.get(key);
    if (sum) sum.n += value;
    else if (this.sums.size < SUMMED_LABEL_SETS_MAX) this.sums.set(key, { attrs: attrs && { ...attrs }, n: value });
    else this.sdk.add(value, attrs);
  }

  /** Hands every label set's sum to the SDK counter and starts them again from 0. */
  flush(): void {
    for (const s of this.sums.values()) {
      if (s.n === 0) continue;
      this.sdk.add(s.n, s.attrs);
      s.n = 0;
    }
  }
}

/**
 * A key for a label set: each name and value length-prefixed (so no name or value can spell another set's key), a value
 * tagged with its type (`1` and `'1'` stay apart, as the SDK keeps them) and `undefined` kept as a value of its own (the
 * SDK keeps `{ a: undefined }` apart from `{}`), in the set's order. Null when a value is not a string, number, boolean
 * or undefined.
 */
function keyOf(attrs: Attributes): string | null {
  let key = '';
  for (const name in attrs) {
    const v: AttributeValue | undefined = attrs[name];
    const t = typeof v;
    if (t !== 'string' && t !== 'number' && t !== 'boolean' && t !== 'undefined') return null;
    const text = t === 'undefined' ? '' : String(v);
    key += `${name.length}:${name}${t[0]}${text.length}:${text}`;
  }
  return key;
}
