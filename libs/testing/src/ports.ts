/**
 * Free ports for the servers a test or a rig starts itself. A port is chosen below Linux's ephemeral range (the ports
 * the kernel hands to outgoing connections as their source port): a port taken from that range (binding port 0, then
 * releasing it for a child to bind) could be handed to one of the machine's thousands of outgoing connections in
 * between, and the child then failed with EADDRINUSE.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** Lowest port chosen. */
const LOW = 10_000;

/** The first port of the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), else Linux's default. */
function ephemeralFirst(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(first) && first > 0 ? first : 32_768;
  } catch {
    return 32_768;
  }
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/**
 * `n` consecutive ports free on 127.0.0.1 (checked by binding each), below the ephemeral range; returns the first.
 * @throws Error when no such run is found in 200 tries, or the ephemeral range leaves no room below it
 */
export async function freePorts(n: number): Promise<number> {
  const high = ephemeralFirst() - n;
  if (!Number.isInteger(n) || n < 1 || high <= LOW) throw new Error(`no room for ${n} ports between ${LOW} and the ephemeral range`);
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = LOW + Math.floor(Math.random() * (high - LOW));
    let ok = true;
    for (let i = 0; i < n && ok; i++) ok = await canBind(base + i);
    if (ok) return base;
  }
  throw new Error(`no ${n} consecutive free ports found`);
}

/** A free port on 127.0.0.1 below the ephemeral range (see {@link freePorts}). */
export function freePort(): Promise<number> {
  return freePorts(1);
}
