/** scripts/unit-guard.mjs patches node:net when imported; it exports nothing. */
export {};
