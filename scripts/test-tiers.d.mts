/** Types of scripts/test-tiers.mjs (see there). */
export declare function importsOf(source: string): Array<{ spec: string; names: string[] }>;
export declare function ownNeeds(source: string): string[];
export declare function serviceNeeds(root: string, file: string): string[];
