#!/usr/bin/env -S npx tsx
/**
 * The `crowdplay` executable (`node dist/crowdplay.js`, or this file under
 * tsx): puts the allocator defaults into the environment, then loads the
 * command (cli.ts) and everything it imports.
 *
 * The order matters: @napi-rs/canvas (the board renderer) carries its own
 * allocator, mimalloc, which reads its `MIMALLOC_*` options from the
 * environment once, when the native module is loaded. ES modules evaluate
 * every static import before the importing module's body, so the defaults
 * are set here, in a module with no native imports, and cli.ts is imported
 * dynamically afterwards (the bundle keeps it in its own chunk for that
 * reason: scripts/build.mjs).
 */
import { applyAllocatorDefaults } from './allocator.ts';

applyAllocatorDefaults(process.env);
await import('./cli.ts');
