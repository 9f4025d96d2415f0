// Detach keys: Docker's syntax, and finding the sequence in a TTY's input.
import { describe, expect, it } from 'vitest';
import { DetachScanner, parseDetachKeys } from '../../src/engine/containers/io/attach.js';

describe('parseDetachKeys', () => {
  it("reads Docker's syntax", () => {
    expect([...parseDetachKeys('ctrl-p,ctrl-q')]).toEqual([16, 17]);
    expect([...parseDetachKeys('ctrl-x,x')]).toEqual([24, 120]);
    expect([...parseDetachKeys('ctrl-@,ctrl-[,ctrl-\\,ctrl-],ctrl-^,ctrl-_')]).toEqual([0, 27, 28, 29, 30, 31]);
    expect([...parseDetachKeys('a,b')]).toEqual([97, 98]);
  });

  it("refuses anything else with dockerd's message", () => {
    expect(() => parseDetachKeys('ctrl-1')).toThrow('Invalid detachKeys (ctrl-1) provided');
    expect(() => parseDetachKeys('ab')).toThrow(/Invalid detachKeys/);
    expect(() => parseDetachKeys('')).toThrow(/Invalid detachKeys/);
  });
});

describe('DetachScanner', () => {
  const keys = Buffer.from([16, 17]);
  const feed = (...chunks: (string | number[])[]) => {
    const s = new DetachScanner(keys);
    let out = '';
    for (const c of chunks) {
      const r = s.push(Buffer.from(c as string));
      out += r.data.toString('latin1');
      if (r.detached) return { out, detached: true };
    }
    return { out, detached: false };
  };

  it('passes input through and stops at the sequence, dropping it and what follows', () => {
    expect(feed('hello')).toEqual({ out: 'hello', detached: false });
    expect(feed('ab\x10\x11cd')).toEqual({ out: 'ab', detached: true });
  });

  it('holds a prefix across reads, and releases it on a mismatch', () => {
    expect(feed('a\x10', '\x11')).toEqual({ out: 'a', detached: true });
    expect(feed('a\x10', 'b')).toEqual({ out: 'a\x10b', detached: false });
    expect(feed('\x10\x10\x11')).toEqual({ out: '\x10', detached: true });
  });
});
