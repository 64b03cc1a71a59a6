/**
 * Several bots behind one Bot API root, as Telegram serves them: a front
 * server that hands `/bot<token>/…` and `/file/bot<token>/…` to the stub of
 * that token's bot (each a {@link TelegramStub} of its own: its own ceilings,
 * faults, chats and records), and answers any other token 401 Unauthorized as
 * Telegram does. Point TELEGRAM_API_ROOT at `url`.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { TelegramStub, type StubOptions } from './stub.ts';

/** One bot of {@link TelegramStubs}: its token and its username. */
export interface StubBot {
  token: string;
  username: string;
}

/** Bots behind one root (see the module doc). */
export class TelegramStubs {
  /** Each bot's stub, by token. */
  readonly stubs = new Map<string, TelegramStub>();
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  /** Base URL once listening (use as TELEGRAM_API_ROOT). */
  url = '';

  /**
   * @param bots each bot's token (`<bot id>:<secret>`) and username
   * @param opts every stub's options (its `tokens` and `bot` are set from `bots`)
   */
  constructor(bots: readonly StubBot[], opts: StubOptions = {}) {
    for (const b of bots) {
      const id = Number(b.token.split(':')[0]);
      this.stubs.set(b.token, new TelegramStub({ ...opts, tokens: [b.token], bot: { ...opts.bot, id, username: b.username } }));
    }
  }

  /** The stub of `token`'s bot. @throws RangeError for a token not given to the constructor */
  of(token: string): TelegramStub {
    const s = this.stubs.get(token);
    if (!s) throw new RangeError('no stub for this token');
    return s;
  }

  /** Starts every stub and the front. @returns the front's URL */
  async listen(host = '127.0.0.1'): Promise<string> {
    for (const s of this.stubs.values()) await s.listen(0, host);
    const server = createServer((req, res) => this.forward(req, res));
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.once('close', () => this.sockets.delete(s));
    });
    this.server = server;
    await new Promise<void>((resolve) => server.listen(0, host, () => resolve()));
    this.url = `http://${host}:${(server.address() as AddressInfo).port}`;
    return this.url;
  }

  /** Stops the front and every stub. */
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    for (const s of this.stubs.values()) await s.close();
  }

  private forward(req: IncomingMessage, res: ServerResponse): void {
    const m = /^\/(?:file\/)?bot([^/]+)\//.exec(req.url ?? '');
    const stub = m ? this.stubs.get(decodeURIComponent(m[1]!)) : undefined;
    if (!stub) {
      req.resume();
      const body = JSON.stringify({ ok: false, error_code: 401, description: 'Unauthorized' });
      res.writeHead(401, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    const target = new URL(req.url ?? '/', stub.url);
    const out = request(target, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    // A stub that drops the connection (fault injection) drops the client's too.
    out.on('error', () => {
      res.socket?.destroy();
      req.socket.destroy();
    });
    req.pipe(out);
  }
}
