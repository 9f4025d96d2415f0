// dockerd's JSON decoding matches a field's name in any case ("storageopt" is
// StorageOpt): what a create reads outside the schemas it reads the same way.

/** The value of Docker's field `name` in `body`, under any case of its name. */
export function anyCase(body: Record<string, unknown>, name: string): unknown {
  const lower = name.toLowerCase();
  return Object.entries(body).find(([k]) => k.toLowerCase() === lower)?.[1];
}
