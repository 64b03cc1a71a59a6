export * from './errors.ts';
export * from './messages.ts';
export * from './validate.ts';
export * from './control.ts';
