export * from './sequencer.ts';
