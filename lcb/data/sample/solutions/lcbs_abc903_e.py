import heapq
import sys


def main() -> None:
    data = sys.stdin.read().split()
    n, m = int(data[0]), int(data[1])
    graph: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    for i in range(m):
        u, v, c = (int(x) for x in data[2 + 3 * i : 5 + 3 * i])
        graph[u].append((v, c))
        graph[v].append((u, c))
    # State (town, used): used = 1 once the free pass has been spent.
    infinity = float("inf")
    best = [[infinity, infinity] for _ in range(n + 1)]
    best[1][0] = 0
    queue = [(0, 1, 0)]
    while queue:
        cost, town, used = heapq.heappop(queue)
        if cost > best[town][used]:
            continue
        for nxt, toll in graph[town]:
            if cost + toll < best[nxt][used]:
                best[nxt][used] = cost + toll
                heapq.heappush(queue, (cost + toll, nxt, used))
            if not used and cost < best[nxt][1]:
                best[nxt][1] = cost
                heapq.heappush(queue, (cost, nxt, 1))
    answer = min(best[n])
    print(answer if answer != infinity else -1)


main()
