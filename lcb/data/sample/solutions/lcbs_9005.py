class Solution:
    def countWindows(self, costs: list[int], low: int, high: int) -> int:
        def at_most(limit: int) -> int:
            count = window = left = 0
            for right, cost in enumerate(costs):
                window += cost
                while window > limit and left <= right:
                    window -= costs[left]
                    left += 1
                count += right - left + 1
            return count

        return at_most(high) - at_most(low - 1)
