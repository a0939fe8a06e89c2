import sys

MOD = 998244353


def longest_climbs(values: list[int]) -> tuple[int, int]:
    # Fenwick tree over altitude ranks holding (best length, number of ways) prefix maxima.
    ranks = {v: i + 1 for i, v in enumerate(sorted(set(values)))}
    size = len(ranks)
    best = [0] * (size + 1)
    ways = [0] * (size + 1)

    def query(pos: int) -> tuple[int, int]:
        length, count = 0, 0
        while pos > 0:
            if best[pos] > length:
                length, count = best[pos], ways[pos]
            elif best[pos] == length:
                count += ways[pos]
            pos -= pos & -pos
        return length, count % MOD

    def update(pos: int, length: int, count: int) -> None:
        while pos <= size:
            if length > best[pos]:
                best[pos], ways[pos] = length, count
            elif length == best[pos]:
                ways[pos] = (ways[pos] + count) % MOD
            pos += pos & -pos

    for value in values:
        length, count = query(ranks[value] - 1)
        update(ranks[value], length + 1, count if length else 1)
    return query(size)


def main() -> None:
    data = sys.stdin.read().split()
    pos, out = 1, []
    for _ in range(int(data[0])):
        n = int(data[pos])
        values = [int(x) for x in data[pos + 1 : pos + 1 + n]]
        pos += 1 + n
        length, count = longest_climbs(values)
        out.append(f"{length} {count}")
    print("\n".join(out))


main()
