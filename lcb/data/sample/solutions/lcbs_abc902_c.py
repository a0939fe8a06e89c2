import sys


def main() -> None:
    data = sys.stdin.read().split()
    n, k = int(data[0]), int(data[1])
    seen: dict[int, int] = {}
    pairs = 0
    for token in data[2 : 2 + n]:
        residue = int(token) % k
        pairs += seen.get((k - residue) % k, 0)
        seen[residue] = seen.get(residue, 0) + 1
    print(pairs)


main()
