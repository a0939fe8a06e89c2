import sys


def spiral(n: int, m: int) -> list[list[int]]:
    grid = [[0] * m for _ in range(n)]
    moves = [(0, 1), (1, 0), (0, -1), (-1, 0)]
    row = col = heading = 0
    for value in range(1, n * m + 1):
        grid[row][col] = value
        dr, dc = moves[heading]
        nr, nc = row + dr, col + dc
        if not (0 <= nr < n and 0 <= nc < m) or grid[nr][nc]:
            heading = (heading + 1) % 4
            dr, dc = moves[heading]
            nr, nc = row + dr, col + dc
        row, col = nr, nc
    return grid


def main() -> None:
    data = sys.stdin.read().split()
    out = []
    for i in range(int(data[0])):
        n, m = int(data[1 + 2 * i]), int(data[2 + 2 * i])
        out.extend(" ".join(map(str, row)) for row in spiral(n, m))
    print("\n".join(out))


main()
