/**
 * Whether a table holds any row, remembered once asked: while it is known to
 * be empty, reads of it answer without asking SQLite (`docker ps -a` and
 * `docker images` on a fresh daemon, the common CI case, cost no query).
 * Whoever inserts says so first (a failed insert then only costs a query
 * later); a deletion makes it unknown again.
 */
export class Presence {
  private known: boolean | undefined;

  constructor(private readonly ask: () => boolean) {}

  get any(): boolean {
    this.known ??= this.ask();
    return this.known;
  }

  added(): void {
    this.known = true;
  }

  removed(): void {
    this.known = undefined;
  }
}
