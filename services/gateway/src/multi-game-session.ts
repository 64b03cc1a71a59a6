/**
 * A multi-channel game socket (`role=game&multi=1`): one game process serving many channels over one connection
 * (docs/protocol.md "Multi-channel games"). The socket authenticates with its tenant's key only; `attach` names
 * channels (each checked for the tenant, one game per channel per gateway, assigned to a shard) or every Telegram
 * chat of the tenant (`chats: true`: those in the store now, and each one the router places later). Each attached
 * channel is a {@link ChannelLink}: its own `ch.<C>.game` subscription, resume point and queue of `ch.<C>.ctl`
 * requests, served by the {@link GameSession} code of a single-channel socket. A `declare` without `channel` is the
 * socket's class-wide declaration: sent to every channel attached, now and later. `detach` releases channels (the
 * shard's `release`: a chat's word puzzle comes back); a socket that closes releases nothing, so a game that
 * reconnects finds its chats as it left them.
 */
import type { Subscription } from '@crowdplay/bus';
import {
  CrowdplayError,
  decodeAssignments,
  formatMessage,
  isCrowdplayError,
  parseInbound,
  type AttachedFrame,
  type DetachedFrame,
  type ErrorCode,
  type GameAttach,
  type GameDetach,
  type MultiGameInbound,
} from '@crowdplay/protocol';
import type { RouterApi } from '@crowdplay/router';
import { isTelegramChannelId } from '@crowdplay/telegram';
import { ChannelLink, sendErrorFrame, type Conn, type LinkMsg } from './connection.ts';
import { dropLink, protocolError, refuse, type GatewayContext } from './gateway-context.ts';
import { GAME_MULTI_QUEUED_MAX, GAME_QUEUE_MAX, type GameSession } from './game-session.ts';

/** `router.assign` calls in flight for one `attach` (a thousand chats are placed in waves, not all at once). */
const ASSIGN_CONCURRENCY = 32;
/** Telegram chats whose tenant was looked up for a `chats` socket (placements of other tenants' chats), remembered. */
const CHAT_TENANTS_KEPT = 10_000;

type Refusal = NonNullable<AttachedFrame['refused']>[number];

/** The multi-channel side of the game session: one per gateway. */
export class MultiGameSession {
  /** Open sockets attached to every chat of their tenant (`chats: true`), for the chats the router places later. */
  private readonly chatSockets = new Set<Conn>();
  private assignmentsSub: Subscription | undefined;
  /** Tenant of Telegram chat channels looked up on placement (bounded: oldest dropped). */
  private readonly chatTenants = new Map<string, string | null>();
  /** Per socket: its attach and detach frames run one after the other. */
  private readonly chains = new WeakMap<Conn, Promise<void>>();
  /** Per `chats` socket: chats it detached by name, not attached again when the router places them. */
  private readonly declined = new WeakMap<Conn, Set<string>>();
  /**
   * Per socket: what its `attach` frames still in flight name (channels by count of frames, and the frames with
   * `chats`), and the per-channel frames held behind them: a frame naming such a channel runs once the attach ends.
   */
  private readonly attaching = new WeakMap<Conn, { channels: Map<string, number>; chats: number; held: Map<string, number> }>();

  constructor(
    private readonly ctx: GatewayContext,
    private readonly game: GameSession,
    private readonly router: RouterApi,
  ) {}

  /** Stops following placements (the gateway closes). */
  close(): void {
    this.assignmentsSub?.unsubscribe();
    this.assignmentsSub = undefined;
    this.chatSockets.clear();
  }

  /** The socket is gone (detach already dropped its links): it takes no new chats. */
  forget(conn: Conn): void {
    this.chatSockets.delete(conn);
  }

  /**
   * One text frame of an open multi-channel game socket. `attach` and `detach` run in order; a per-channel message
   * names an attached channel (else CP_ERR_GAME_NOT_ATTACHED with its `ref` and `channel`) and joins that channel's
   * queue (full: CP_ERR_GAME_CHANNEL_BUSY, retryable); one naming a channel that an attach still in flight names
   * (or a chat, after an attach with `chats`) waits for that attach; a `declare` without `channel` goes to every
   * attached channel.
   */
  onText(conn: Conn, text: string): void {
    let msg: MultiGameInbound;
    try {
      msg = parseInbound('multigame', text);
    } catch (err) {
      protocolError(this.ctx, conn, err, text);
      return;
    }
    if (msg.t === 'attach' || msg.t === 'detach') {
      const m = msg;
      const pending = m.t === 'attach' ? this.pendingAttach(conn, m) : undefined;
      const run = (this.chains.get(conn) ?? Promise.resolve()).then(() => (m.t === 'attach' ? this.attach(conn, m) : this.detach(conn, m)));
      this.chains.set(conn, run.catch((err: unknown) => this.failed(conn, m.t, m.ref, err)).finally(pending));
      return;
    }
    if (msg.channel === undefined) {
      if (msg.t !== 'declare') {
        protocolError(
          this.ctx,
          conn,
          new CrowdplayError('CP_ERR_PROTO_INVALID', ['/channel is required on a multi-channel game socket']),
          text,
        );
        return;
      }
      conn.defaultDeclare = msg;
      for (const link of conn.links?.values() ?? []) if (!link.detaching) this.enqueue(conn, link, { ...msg, channel: link.channel });
      return;
    }
    const a = this.attaching.get(conn);
    if (a && !conn.links?.has(msg.channel) && (a.channels.has(msg.channel) || (a.chats > 0 && isTelegramChannelId(msg.channel)))) {
      // Sent after an attach that names its channel and is still in flight: it runs once that attach ended (attached,
      // it joins the channel's queue; refused, it is refused CP_ERR_GAME_NOT_ATTACHED), at most GAME_QUEUE_MAX held.
      if ((a.held.get(msg.channel) ?? 0) >= GAME_QUEUE_MAX) {
        this.busy(conn, msg.channel, msg.ref);
        return;
      }
      count(a.held, msg.channel, 1);
      const m = msg;
      const channel = msg.channel;
      this.chains.set(
        conn,
        (this.chains.get(conn) ?? Promise.resolve()).then(() => {
          count(a.held, channel, -1);
          if (conn.state === 'open') this.toChannel(conn, m, channel);
        }),
      );
      return;
    }
    this.toChannel(conn, msg, msg.channel);
  }

  /**
   * Counts an `attach` frame as in flight (its channels, its `chats`) until the returned function is called, once
   * the frame has run.
   */
  private pendingAttach(conn: Conn, m: GameAttach): () => void {
    let a = this.attaching.get(conn);
    if (!a) {
      a = { channels: new Map(), chats: 0, held: new Map() };
      this.attaching.set(conn, a);
    }
    const st = a;
    const names = [...new Set(m.channels ?? [])];
    for (const ch of names) count(st.channels, ch, 1);
    if (m.chats) st.chats++;
    return () => {
      for (const ch of names) count(st.channels, ch, -1);
      if (m.chats) st.chats--;
    };
  }

  /** A per-channel frame of the socket: to its channel's queue when the channel is attached, else refused. */
  private toChannel(conn: Conn, msg: Exclude<MultiGameInbound, GameAttach | GameDetach>, channel: string): void {
    const link = conn.links?.get(channel);
    if (!link || link.detaching) {
      refuse(this.ctx, 'CP_ERR_GAME_NOT_ATTACHED', conn, { gameChannel: channel });
      sendErrorFrame(conn, 'CP_ERR_GAME_NOT_ATTACHED', formatMessage('CP_ERR_GAME_NOT_ATTACHED', [channel]), msg.ref, channel);
      return;
    }
    this.enqueue(conn, link, msg);
  }

  /**
   * Queues one message for a channel: refused CP_ERR_GAME_CHANNEL_BUSY when the channel holds GAME_QUEUE_MAX already
   * (nothing queued); the socket stops being read while GAME_MULTI_QUEUED_MAX wait across its channels.
   */
  private enqueue(conn: Conn, link: ChannelLink, msg: LinkMsg): void {
    if (link.gameQueue.length >= GAME_QUEUE_MAX && msg.t !== 'release') {
      this.busy(conn, link.channel, 'ref' in msg ? msg.ref : undefined);
      return;
    }
    link.gameQueue.push(msg);
    if (++conn.multiQueued >= GAME_MULTI_QUEUED_MAX && !conn.ws.isPaused) conn.ws.pause();
    this.game.pump(conn, link);
  }

  /** Refuses one frame for `channel`: it holds GAME_QUEUE_MAX already (CP_ERR_GAME_CHANNEL_BUSY, retryable). */
  private busy(conn: Conn, channel: string, ref: string | undefined): void {
    refuse(this.ctx, 'CP_ERR_GAME_CHANNEL_BUSY', conn, { gameChannel: channel });
    sendErrorFrame(conn, 'CP_ERR_GAME_CHANNEL_BUSY', formatMessage('CP_ERR_GAME_CHANNEL_BUSY', [channel, GAME_QUEUE_MAX]), ref, channel);
  }

  /**
   * `attach`: checks every channel named (and, with `chats`, every Telegram chat of the tenant), attaches those that
   * pass, assigns them to shards, resumes each from its `lastEventIds` entry, sends the class-wide declaration, and
   * answers `attached` with the channels attached and the refusals. A channel already attached is listed again.
   */
  private async attach(conn: Conn, msg: GameAttach): Promise<void> {
    const { ctx } = this;
    const links = conn.links;
    if (!links) return;
    const wanted = new Set(msg.channels ?? []);
    const declined = this.declined.get(conn);
    for (const ch of wanted) declined?.delete(ch);
    if (msg.chats) {
      this.declined.delete(conn);
      conn.chats = true;
      this.chatSockets.add(conn);
      this.followPlacements();
      for (const ch of await ctx.store.channels.telegramChatsOf(conn.tenantId, ctx.config.gateway.gameMaxChannels)) wanted.add(ch);
      if (conn.state !== 'open') return;
    }
    const refused: Refusal[] = [];
    const attached: string[] = [];
    const fresh: ChannelLink[] = [];
    const rows = await ctx.store.channels.getMany([...wanted].filter((c) => !links.has(c)));
    if (conn.state !== 'open') return;
    for (const ch of wanted) {
      if (links.get(ch)?.detaching === false) {
        attached.push(ch);
        continue;
      }
      const code = await this.check(conn, ch, rows.get(ch)?.tenantId);
      if (conn.state !== 'open') return;
      if (code) {
        refused.push({
          channel: ch,
          code,
          message: formatMessage(code, code === 'CP_ERR_GAME_TOO_MANY_CHANNELS' ? [ctx.config.gateway.gameMaxChannels] : [ch]),
        });
        continue;
      }
      fresh.push(this.link(conn, ch, msg.lastEventIds?.[ch]));
    }
    for (let i = 0; i < fresh.length; i += ASSIGN_CONCURRENCY) {
      const wave = fresh.slice(i, i + ASSIGN_CONCURRENCY);
      const results = await Promise.allSettled(wave.map((l) => this.router.assign(l.channel)));
      results.forEach((r, j) => {
        const link = wave[j]!;
        if (r.status === 'fulfilled') return;
        const code: ErrorCode = isCrowdplayError(r.reason) ? r.reason.code : 'CP_ERR_CHANNEL_UNAVAILABLE';
        refused.push({ channel: link.channel, code, message: formatMessage(code, [link.channel]) });
        this.unlink(conn, link);
      });
      if (conn.state !== 'open') return;
    }
    for (const link of fresh) {
      if (conn.links?.get(link.channel) !== link) continue;
      attached.push(link.channel);
      this.startLink(conn, link);
    }
    for (const r of refused) refuse(ctx, r.code as ErrorCode, conn, { gameChannel: r.channel, op: 'attach' });
    this.send(conn, {
      t: 'attached',
      ...(msg.ref === undefined ? {} : { ref: msg.ref }),
      channels: attached,
      ...(refused.length > 0 ? { refused } : {}),
    });
  }

  /**
   * Why `channel` cannot be attached to the socket, or undefined: over GAME_MAX_CHANNELS, another tenant's,
   * a Telegram chat that does not exist (a game never creates one), another game's on this gateway. A channel that
   * does not exist otherwise is created for the tenant, as a single-channel game's connect does.
   */
  private async check(conn: Conn, channel: string, tenant: string | undefined): Promise<ErrorCode | undefined> {
    const { ctx } = this;
    if ((conn.links?.size ?? 0) >= ctx.config.gateway.gameMaxChannels) return 'CP_ERR_GAME_TOO_MANY_CHANNELS';
    if (tenant === undefined) {
      if (isTelegramChannelId(channel)) return 'CP_ERR_CHANNEL_UNKNOWN';
      try {
        tenant = (await ctx.store.channels.ensure(channel, conn.tenantId, ctx.config.quota.channels)).tenantId;
      } catch (err) {
        return isCrowdplayError(err) ? err.code : 'CP_ERR_CHANNEL_UNAVAILABLE';
      }
    }
    if (tenant !== conn.tenantId) return 'CP_ERR_AUTH_FORBIDDEN_CHANNEL';
    const other = ctx.games.get(channel);
    if (other !== undefined && other !== conn) return 'CP_ERR_CHANNEL_GAME_CONNECTED';
    return undefined;
  }

  /** A new link: holds the channel's game slot on this gateway and subscribes its batches (held until {@link startLink}). */
  private link(conn: Conn, channel: string, lastEventId: number | undefined): ChannelLink {
    const link = new ChannelLink(channel, lastEventId);
    conn.links?.set(channel, link);
    this.ctx.games.set(channel, conn);
    this.game.subscribeLink(conn, link);
    return link;
  }

  /** Drops a link that never started (its assign failed). */
  private unlink(conn: Conn, link: ChannelLink): void {
    dropLink(this.ctx, conn, link);
    if (conn.links?.get(link.channel) === link) conn.links.delete(link.channel);
  }

  /** The link is attached: its resume runs, and the class-wide declaration is queued for it. */
  private startLink(conn: Conn, link: ChannelLink): void {
    this.game.startLink(conn, link);
    const d = conn.defaultDeclare;
    if (d && d.t === 'declare') {
      link.declaredByDefault = true;
      this.enqueue(conn, link, { ...d, channel: link.channel });
    }
  }

  /**
   * `detach`: each channel named (with `chats`, every Telegram chat attached, and no new ones) finishes its queued
   * messages, then the shard is asked to `release` it (retried like a declare), then it leaves the socket. Answered
   * `detached` with the channels that left; a channel not attached is left out.
   */
  private async detach(conn: Conn, msg: GameDetach): Promise<void> {
    const links = conn.links;
    if (!links) return;
    const names = new Set(msg.channels ?? []);
    if (msg.chats) {
      conn.chats = false;
      this.chatSockets.delete(conn);
      for (const ch of links.keys()) if (isTelegramChannelId(ch)) names.add(ch);
    }
    const leaving: ChannelLink[] = [];
    if (conn.chats) {
      let declined = this.declined.get(conn);
      if (!declined) this.declined.set(conn, (declined = new Set()));
      for (const ch of names) if (isTelegramChannelId(ch)) declined.add(ch);
    }
    for (const ch of names) {
      const link = links.get(ch);
      if (!link || link.detaching) continue;
      link.detaching = true;
      leaving.push(link);
    }
    await Promise.all(
      leaving.map(
        (link) =>
          new Promise<void>((resolve) => {
            link.onIdle = resolve;
            this.enqueue(conn, link, { t: 'release' });
          }),
      ),
    );
    for (const link of leaving) this.unlink(conn, link);
    if (conn.state !== 'open') return;
    this.send(conn, { t: 'detached', ...(msg.ref === undefined ? {} : { ref: msg.ref }), channels: leaving.map((l) => l.channel) });
  }

  /** Subscribes (once per gateway) to the router's placements, for the chats sockets. */
  private followPlacements(): void {
    if (this.assignmentsSub) return;
    this.assignmentsSub = this.ctx.bus.subscribe(this.ctx.subjects.routerAssignments(), (m) => {
      if (this.chatSockets.size === 0) return;
      let changes;
      try {
        changes = decodeAssignments(m.data);
      } catch {
        return;
      }
      for (const c of changes)
        if (c.shard !== null && isTelegramChannelId(c.channel) && !this.ctx.games.has(c.channel)) void this.placed(c.channel);
    });
  }

  /**
   * A Telegram chat was placed on a shard and no game on this gateway serves it: a `chats` socket of its tenant
   * attaches it and is told with an `attached` frame (no `ref`). Never rejects.
   */
  private async placed(channel: string): Promise<void> {
    let tenant = this.chatTenants.get(channel);
    if (tenant === undefined) {
      try {
        tenant = (await this.ctx.store.channels.get(channel))?.tenantId ?? null;
      } catch (err) {
        this.ctx.logger.warn({ err, channel }, 'could not look up a placed chat for its game');
        return;
      }
      this.chatTenants.set(channel, tenant);
      if (this.chatTenants.size > CHAT_TENANTS_KEPT) this.chatTenants.delete(this.chatTenants.keys().next().value!);
    }
    const conn = [...this.chatSockets].find(
      (s) => s.tenantId === tenant && s.state === 'open' && s.chats && !this.declined.get(s)?.has(channel),
    );
    if (!conn || this.ctx.games.has(channel)) return;
    if ((conn.links?.size ?? 0) >= this.ctx.config.gateway.gameMaxChannels) {
      refuse(this.ctx, 'CP_ERR_GAME_TOO_MANY_CHANNELS', conn, { gameChannel: channel, op: 'attach' });
      return;
    }
    const link = this.link(conn, channel, undefined);
    this.startLink(conn, link);
    this.send(conn, { t: 'attached', channels: [channel] });
  }

  /**
   * An attach or detach that threw (the store unreachable): answered with an error frame carrying its `ref`
   * (CP_ERR_STORE_UNAVAILABLE, retryable, for anything but a CrowdplayError), so the game can send it again.
   */
  private failed(conn: Conn, op: 'attach' | 'detach', ref: string | undefined, err: unknown): void {
    const code: ErrorCode = isCrowdplayError(err) ? err.code : 'CP_ERR_STORE_UNAVAILABLE';
    const message = isCrowdplayError(err) ? err.message : formatMessage(code, [err instanceof Error ? err.message : String(err)]);
    this.ctx.logger.warn({ err, op }, 'game attach/detach failed');
    refuse(this.ctx, code, conn, { op });
    sendErrorFrame(conn, code, message, ref);
  }

  private send(conn: Conn, frame: AttachedFrame | DetachedFrame): void {
    if (conn.writable) conn.ws.send(JSON.stringify(frame));
  }
}

/** Adds `delta` to `key`'s count in `counts`, dropping the key at 0. */
function count(counts: Map<string, number>, key: string, delta: number): void {
  const n = (counts.get(key) ?? 0) + delta;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}
