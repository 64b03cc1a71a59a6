/**
 * Array parameters of the set-based statements (`unnest($1::text[], …)`), sent to Postgres in its binary array
 * format. node-postgres sends a JS array as a text array literal, escaping every element with two regular
 * expressions and concatenating the results, and Postgres parses the escapes back: for a tick's event log rows
 * (JSON bodies, full of quotes) that was a shard's largest allocation and a large share of its CPU per row. A Buffer
 * parameter goes out as binary (format code 1) and Postgres reads it with array_recv, unescaped. Decision 0044 has
 * the measurement.
 *
 * The binary layout is Postgres's (src/backend/utils/adt/arrayfuncs.c, array_send/array_recv): int32 ndim, int32
 * has-nulls flag, uint32 element type OID, per dimension int32 length and int32 lower bound, then per element int32
 * byte length (-1 for NULL) and its bytes (text: UTF-8, textrecv; int8: 8 bytes big-endian, int8recv).
 */

/** Element type OIDs (pg_type): the parameter's declared type (`$n::text[]`, `$n::bigint[]`) must match. */
const TEXT_OID = 25;
const INT8_OID = 20;
const TWO_32 = 4_294_967_296;

/**
 * An array parameter: {@link textArray} or {@link int8Array}. Each database engine sends it its own way (PgDb as
 * Postgres's binary array, PgliteDb as the plain array PGlite serialises itself).
 */
export class ArrayParam {
  /** Use {@link textArray} or {@link int8Array}. */
  constructor(
    readonly kind: 'text' | 'int8',
    readonly values: ReadonlyArray<string | number | null>,
  ) {}

  /**
   * The array in Postgres's binary format, for a parameter declared `text[]` or `bigint[]`.
   * @throws RangeError for an int8 element that is not a safe integer (nothing is sent)
   */
  binary(): Buffer {
    return this.kind === 'text'
      ? encodeText(this.values as ReadonlyArray<string | null>)
      : encodeInt8(this.values as ReadonlyArray<number | null>);
  }
}

/**
 * A `text[]` parameter (`$n::text[]`): the strings as they are, NULL for null. A string must not contain U+0000,
 * which Postgres's text cannot hold (the statement fails, as with the literal form).
 */
export function textArray(values: ReadonlyArray<string | null>): ArrayParam {
  return new ArrayParam('text', values);
}

/** A `bigint[]` parameter (`$n::bigint[]`): safe integers, NULL for null. Checked when the statement is sent. */
export function int8Array(values: ReadonlyArray<number | null>): ArrayParam {
  return new ArrayParam('int8', values);
}

/** The query's parameters with each ArrayParam as Postgres's binary array (what PgDb sends). */
export function binaryParams(params: unknown[] | undefined): unknown[] | undefined {
  if (!params?.some((p) => p instanceof ArrayParam)) return params;
  return params.map((p) => (p instanceof ArrayParam ? p.binary() : p));
}

/** The query's parameters with each ArrayParam as its plain array (what PgliteDb sends). */
export function plainParams(params: unknown[] | undefined): unknown[] | undefined {
  if (!params?.some((p) => p instanceof ArrayParam)) return params;
  return params.map((p) => (p instanceof ArrayParam ? p.values : p));
}

/** Header of a one-dimensional array (or of an empty one: ndim 0, no dimension) into `buf`; returns the offset after it. */
function header(buf: Buffer, n: number, hasNull: boolean, oid: number): number {
  buf.writeInt32BE(n === 0 ? 0 : 1, 0);
  buf.writeInt32BE(hasNull ? 1 : 0, 4);
  buf.writeUInt32BE(oid, 8);
  if (n === 0) return 12;
  buf.writeInt32BE(n, 12);
  buf.writeInt32BE(1, 16);
  return 20;
}

function encodeText(values: ReadonlyArray<string | null>): Buffer {
  const n = values.length;
  const lengths = new Array<number>(n);
  let size = n === 0 ? 12 : 20;
  let hasNull = false;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) {
      lengths[i] = -1;
      hasNull = true;
      size += 4;
    } else {
      const l = Buffer.byteLength(v, 'utf8');
      lengths[i] = l;
      size += 4 + l;
    }
  }
  const buf = Buffer.allocUnsafe(size);
  let off = header(buf, n, hasNull, TEXT_OID);
  for (let i = 0; i < n; i++) {
    const l = lengths[i]!;
    buf.writeInt32BE(l, off);
    off += 4;
    if (l > 0) off += buf.write(values[i]!, off, 'utf8');
  }
  return buf;
}

function encodeInt8(values: ReadonlyArray<number | null>): Buffer {
  const n = values.length;
  let hasNull = false;
  let nulls = 0;
  for (const v of values) {
    if (v === null || v === undefined) {
      hasNull = true;
      nulls++;
    } else if (!Number.isSafeInteger(v)) throw new RangeError(`bigint[] element must be a safe integer, got ${String(v)}`);
  }
  const buf = Buffer.allocUnsafe((n === 0 ? 12 : 20) + nulls * 4 + (n - nulls) * 12);
  let off = header(buf, n, hasNull, INT8_OID);
  for (const v of values) {
    if (v === null || v === undefined) {
      buf.writeInt32BE(-1, off);
      off += 4;
      continue;
    }
    buf.writeInt32BE(8, off);
    // Two's complement in two halves: a safe integer is within ±2^53, so the high half fits an int32.
    const hi = Math.floor(v / TWO_32);
    buf.writeInt32BE(hi, off + 4);
    buf.writeUInt32BE(v - hi * TWO_32, off + 8);
    off += 12;
  }
  return buf;
}
