import sys


def main() -> None:
    data = sys.stdin.read().split()
    n, threshold = int(data[0]), int(data[1])
    scores = [int(token) for token in data[2 : 2 + n]]
    print(sum(score for score in scores if score >= threshold))


main()
