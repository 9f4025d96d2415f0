// better-sqlite3 13 under its npm alias: the same API as 12, whose types are installed.
declare module 'better-sqlite3-13' {
  import Database from 'better-sqlite3';
  export default Database;
}
