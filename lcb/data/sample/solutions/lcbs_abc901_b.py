import sys


def main() -> None:
    data = sys.stdin.read().split()
    n = int(data[0])
    xs = [int(token) for token in data[1 : 1 + n]]
    low, high = min(xs), max(xs)
    print((low + high) / 2, (high - low) / 2)


main()
