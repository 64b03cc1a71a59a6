/**
 * A lenient multipart/form-data reader (RFC 7578) for the stub. grammY
 * writes its part headers without a space after the colon and leaves
 * `filename=` unquoted, which undici's strict `Response.formData()` refuses;
 * Telegram's server accepts it, so the stub must too.
 */

/** One part: a field (`filename` undefined) or a file. */
export interface Part {
  name: string;
  filename?: string;
  data: Buffer;
}

/** The boundary of a `multipart/form-data; boundary=…` content type, or undefined. */
export function boundaryOf(contentType: string): string | undefined {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? (m[1] ?? m[2]) : undefined;
}

/**
 * Splits a multipart body into its parts.
 * @throws Error when the body does not start with the boundary or a part has no name
 */
export function parseMultipart(body: Buffer, boundary: string): Part[] {
  const delim = Buffer.from(`--${boundary}`);
  const parts: Part[] = [];
  let pos = body.indexOf(delim);
  if (pos < 0) throw new Error('multipart: no boundary in the body');
  for (;;) {
    pos += delim.length;
    // "--" after a delimiter ends the body.
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) break;
    if (body[pos] === 0x0d && body[pos + 1] === 0x0a) pos += 2;
    const headerEnd = body.indexOf('\r\n\r\n', pos);
    if (headerEnd < 0) throw new Error('multipart: a part without a header end');
    const headers = body.subarray(pos, headerEnd).toString('utf8');
    const next = body.indexOf(delim, headerEnd + 4);
    if (next < 0) throw new Error('multipart: a part without a closing boundary');
    // The part's data ends with the CRLF before the next delimiter.
    const dataEnd = body[next - 2] === 0x0d && body[next - 1] === 0x0a ? next - 2 : next;
    const disposition = /content-disposition:\s*form-data\s*;([^\r\n]*)/i.exec(headers)?.[1] ?? '';
    const name = /(?:^|;)\s*name=(?:"([^"]*)"|([^;\s]*))/i.exec(disposition);
    if (!name) throw new Error('multipart: a part without a name');
    const filename = /(?:^|;)\s*filename=(?:"([^"]*)"|([^;\s]*))/i.exec(disposition);
    const part: Part = { name: name[1] ?? name[2] ?? '', data: body.subarray(headerEnd + 4, dataEnd) };
    if (filename) part.filename = filename[1] ?? filename[2] ?? '';
    parts.push(part);
    pos = next;
  }
  return parts;
}
